"""The CPU backend's kernel calls, one base class per section of the backend contract
(``conv.py``, ``pool.py``, ``rows.py``) over the
module loader of ``build.py``.

Every call takes numpy arrays and returns True when it did the work, or False when the case is
not one the C kernels take (a dtype other than float32/float64, a non-contiguous array, no
compiled kernels), in which case the backend runs its numpy reference instead.
"""
from .build import KernelModules
from .conv import ConvKernels
from .pool import PoolKernels


class CPUKernels(ConvKernels, PoolKernels, KernelModules):
    """The C kernels of one CPU backend: ``builder`` and ``gemm`` as for
    :class:`~neonlite.backends.cpu.build.KernelModules`."""
