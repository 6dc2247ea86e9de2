"""Calling an op-table row's C kernel directly on numpy arrays, as the tests of the CPU
kernels do: the arguments as the backend method made from the row takes its tensors."""
import inspect

from neonlite.backends.ops import OPS
from neonlite.backends.ops.dispatch import TableOps


def run_kernel(kernels, name, *args, **kwargs):
    """``kernels.run_op`` (a :class:`~neonlite.backends.cpu.build.KernelModules`) of row
    ``name`` on numpy ``args``/``kwargs`` bound by the contract's signature: True when the C
    function ran, False where the reference must run (nothing written)."""
    op = OPS[name]
    bound = inspect.signature(getattr(TableOps, name)).bind(None, *args, **kwargs)
    bound.apply_defaults()
    given = bound.arguments
    return kernels.run_op(op, tuple(given[o.name] for o in op.operands),
                          tuple(given[s.name] for s in op.scalars))


def run_reference(name, *args, **kwargs):
    """Row ``name``'s numpy reference on ``args``/``kwargs`` bound as in :func:`run_kernel`."""
    op = OPS[name]
    bound = inspect.signature(getattr(TableOps, name)).bind(None, *args, **kwargs)
    bound.apply_defaults()
    given = bound.arguments
    op.reference(*(given[o.name] for o in op.operands), *(given[s.name] for s in op.scalars))
