"""Batch norm on the CPU where the backend makes a choice (``Backend.batchnorm_fprop``,
``batchnorm_moments``): the C function by mode (``batchnorm_fprop_train`` with its work array,
or ``batchnorm_fprop_infer``) and the host statistics of synchronised batch norm, each else
the numpy reference.  Layer norm, ``batchnorm_apply`` and ``batchnorm_bprop`` are dispatched by
the op table (``ops/norm.py``).  Shapes: batch norm normalizes (M, C) over its rows."""
import numpy as np

from ..operand_sizes import check_operand_sizes, check_rank
from ..reference import norm as reference


def batchnorm_fprop_kernel(kernels, x, gamma, beta, y, xhat, mean, invstd, running_mean,
                           running_var, eps, momentum, inference, relu=False):
    """Batch norm of numpy x (M, C) over its rows by the C kernels of ``kernels`` (a
    :class:`~neonlite.backends.cpu.build.KernelModules`), then y = max(y, 0) when ``relu``;
    False where they do not take the arrays (the reference must run)."""
    arrays = (x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var)
    check_operand_sizes("batchnorm_fprop", x, x.shape[-1], whole=(("y", y), ("xhat", xhat)),
                        columns=(("gamma", gamma), ("beta", beta), ("mean", mean),
                                 ("invstd", invstd), ("running_mean", running_mean),
                                 ("running_var", running_var)))
    module = kernels.usable("norm", *arrays)
    if module is None:
        return False
    ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays]
    M, C = x.shape
    if inference:
        module.lib.batchnorm_fprop_infer(*ptrs, M, C, eps, bool(relu))
    else:
        work = kernels.block_sums_work(module, "norm", x.dtype, M, C)
        module.lib.batchnorm_fprop_train(*ptrs, module.ffi.from_buffer("double[]", work), M, C,
                                         eps, momentum, bool(relu))
    return True


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
    """The batch norm ops of the CPU backend that the op table does not make."""

    def batchnorm_fprop(self, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                        eps=1e-5, momentum=0.9, inference=False, relu=False):
        arrays = tuple(t._ary for t in (x, gamma, beta, y, xhat, mean, invstd, running_mean,
                                        running_var))
        if not batchnorm_fprop_kernel(self.kernels, *arrays, eps, momentum, inference, relu):
            reference.batchnorm_fprop(*arrays, eps, momentum, inference)
            if relu:
                np.maximum(arrays[3], 0, out=arrays[3])

    def batchnorm_moments(self, x):
        check_rank("batchnorm_moments", "x", x, 2)
        C = x.shape[-1]
        mean, m2 = np.empty(C), np.empty(C)
        if batchnorm_moments_kernel(self.kernels, x._ary, mean, m2):
            return mean, m2
        return reference.batchnorm_moments(x._ary)
