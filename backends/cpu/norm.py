"""Batch norm's moments on the CPU (``Backend.batchnorm_moments``): the host statistics of
synchronised batch norm (float64 arrays returned, not written into tensors), by the C kernel
else the numpy reference.  Every other norm op is dispatched by the op table
(``ops/norm.py``).  Shapes: batch norm normalizes (M, C) over its rows."""
import numpy as np

from ..operand_sizes import check_rank
from ..reference import norm as reference


def batchnorm_moments_kernel(kernels, x, mean, m2):
    """mean, m2 (C,) float64 = per-channel mean and sum of squared deviations of the rows of
    numpy x (M, C) by the C kernels of ``kernels``; False where they do not take it."""
    module = kernels.usable("norm", x)
    if module is None or mean.dtype != np.float64 or m2.dtype != np.float64:
        return False
    ffi = module.ffi
    work = kernels.block_sums_work(module, "norm", x.dtype, *x.shape)
    module.lib.batchnorm_moments(ffi.from_buffer("real[]", x), x.shape[0], x.shape[1],
                                 ffi.from_buffer("double[]", mean),
                                 ffi.from_buffer("double[]", m2),
                                 ffi.from_buffer("double[]", work))
    return True


class CPUNormOps:
    """``batchnorm_moments``, the norm op of the CPU backend that the op table does not make."""

    def batchnorm_moments(self, x):
        check_rank("batchnorm_moments", "x", x, 2)
        C = x.shape[-1]
        mean, m2 = np.empty(C), np.empty(C)
        if batchnorm_moments_kernel(self.kernels, x._ary, mean, m2):
            return mean, m2
        return reference.batchnorm_moments(x._ary)
