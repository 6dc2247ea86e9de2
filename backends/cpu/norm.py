"""Batch norm and layer norm on the CPU (``Backend.batchnorm_*``, ``layernorm_*``): the calls of
``kernels/cpu/norm.c`` (:class:`NormKernels`) and the backend's ops (:class:`CPUNormOps`), which
run the numpy reference where the kernels do not take the case.  Shapes: batch norm normalizes
(M, C) over its rows; layer norm (M, D) over its last axis."""
import numpy as np

from ..operand_sizes import check_operand_sizes, check_rank
from ..reference import norm as reference
from .build import pointer
from .tensor import all_kept, array_of as _ary


class NormKernels:
    """The norm calls of :class:`~neonlite.backends.cpu.kernels.CPUKernels` (True when done)."""

    def _norm_work(self, module, dtype, rows, cols):
        """The ``work`` pointer of the norm kernels for (rows, cols) (see ``kernels/cpu/norm.h``),
        kept in ``workspaces``."""
        return module.ffi.from_buffer("double[]",
                                      self.block_sums_work(module, "norm", dtype, rows, cols))

    def batchnorm_fprop(self, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                        eps, momentum, inference, relu=False):
        """Batch norm of x (M, C) over its rows (see ``Backend.batchnorm_fprop``), then
        y = max(y, 0) when ``relu``."""
        arrays = (x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var)
        check_operand_sizes("batchnorm_fprop", x, x.shape[-1], whole=(("y", y), ("xhat", xhat)),
                            columns=(("gamma", gamma), ("beta", beta), ("mean", mean),
                                     ("invstd", invstd), ("running_mean", running_mean),
                                     ("running_var", running_var)))
        module = self.usable("norm", *arrays)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays]
        M, C = x.shape
        if inference:
            module.lib.batchnorm_fprop_infer(*ptrs, M, C, eps, bool(relu))
        else:
            module.lib.batchnorm_fprop_train(*ptrs, self._norm_work(module, x.dtype, M, C), M, C,
                                             eps, momentum, bool(relu))
        return True

    def batchnorm_moments(self, x, mean, m2):
        """mean, m2 (C,) float64 = per-channel mean and sum of squared deviations of the rows
        of x (M, C)."""
        module = self.usable("norm", x)
        if module is None or mean.dtype != np.float64 or m2.dtype != np.float64:
            return False
        ffi = module.ffi
        module.lib.batchnorm_moments(ffi.from_buffer("real[]", x), x.shape[0], x.shape[1],
                                     ffi.from_buffer("double[]", mean),
                                     ffi.from_buffer("double[]", m2),
                                     self._norm_work(module, x.dtype, *x.shape))
        return True

    def batchnorm_apply(self, x, gamma, beta, y, xhat, mean, invstd, relu=False):
        """xhat = (x - mean) * invstd, y = gamma * xhat + beta (then max(y, 0) with relu)."""
        arrays = (x, gamma, beta, y, xhat, mean, invstd)
        check_operand_sizes("batchnorm_apply", x, x.shape[-1], whole=(("y", y), ("xhat", xhat)),
                            columns=(("gamma", gamma), ("beta", beta), ("mean", mean),
                                     ("invstd", invstd)))
        module = self.usable("norm", *arrays)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays]
        module.lib.batchnorm_apply(*ptrs, x.shape[0], x.shape[1], bool(relu))
        return True

    def batchnorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, beta_acc=0.0, y=None):
        """dx (M, C), and dgamma, dbeta (1, C) accumulated into; ``y`` (M, C), the output of a
        fprop with ``relu``, masks dy by y > 0."""
        arrays = (dy, xhat, invstd, gamma, dx, dgamma, dbeta) + (() if y is None else (y,))
        check_operand_sizes("batchnorm_bprop", dy, dy.shape[-1],
                            whole=(("xhat", xhat), ("dx", dx), ("y", y)),
                            columns=(("invstd", invstd), ("gamma", gamma), ("dgamma", dgamma),
                                     ("dbeta", dbeta)))
        module = self.usable("norm", *arrays)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays[:7]]
        mask = module.ffi.NULL if y is None else module.ffi.from_buffer("real[]", y)
        module.lib.batchnorm_bprop(*ptrs, self._norm_work(module, dy.dtype, *dy.shape),
                                   dy.shape[0], dy.shape[1], beta_acc, mask)
        return True

    def layernorm_fprop(self, x, gamma, beta, y, xhat, invstd, eps, residual=None, total=None,
                        keep=False):
        """Layer norm of x (M, D) over its last axis; invstd (M, 1).  With ``residual`` and
        ``total`` (M, D): total = x + residual, normalized in x's place.  ``keep``: see
        ``run_call``."""
        arrays = (x, gamma, beta, y, xhat, invstd, residual, total)
        return self.run_call("layernorm_fprop", arrays, eps, keep,
                             lambda: self._layernorm_fprop_call(*arrays, eps))

    def _layernorm_fprop_call(self, x, gamma, beta, y, xhat, invstd, residual, total, eps):
        check_operand_sizes("layernorm_fprop", x, x.shape[-1] if x.ndim else 1,
                            whole=(("y", y), ("xhat", xhat), ("residual", residual),
                                   ("total", total)),
                            rows=(("invstd", invstd),), columns=(("gamma", gamma),
                                                                 ("beta", beta)))
        arrays = (x, gamma, beta, y, xhat, invstd)
        given = tuple(a for a in arrays if a is not None)
        joined = () if residual is None else (residual, total)
        module = self.usable("norm", *given, *joined)
        if module is None or (joined and (
                residual.shape != x.shape or total.shape != x.shape
                or residual.dtype != x.dtype or total.dtype != x.dtype
                or any(np.may_share_memory(total, a) for a in given + (residual,)))):
            return None
        ffi = module.ffi
        ptrs = [pointer(ffi, a) for a in arrays + joined]
        if not joined:
            ptrs += [ffi.NULL, ffi.NULL]
        return module.lib.layernorm_fprop, (*ptrs, x.shape[0], x.shape[1], eps)

    def layernorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None,
                        keep=False):
        """dx (M, D) (plus ``residual`` (M, D) when given), and dgamma, dbeta (1, D)
        accumulated into.  ``keep``: see ``run_call``."""
        arrays = (dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual)
        return self.run_call("layernorm_bprop", arrays, None, keep,
                             lambda: self._layernorm_bprop_call(*arrays))

    def _layernorm_bprop_call(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual):
        check_operand_sizes("layernorm_bprop", dy, dy.shape[-1] if dy.ndim else 1,
                            whole=(("xhat", xhat), ("dx", dx), ("residual", residual)),
                            rows=(("invstd", invstd),),
                            columns=(("gamma", gamma), ("dgamma", dgamma), ("dbeta", dbeta)))
        arrays = (dy, xhat, invstd, gamma, dx, dgamma, dbeta)
        extra = () if residual is None else (residual,)
        module = self.usable("norm", *arrays, *extra)
        if module is None or (residual is not None and (
                residual.shape != dx.shape or residual.dtype != dx.dtype
                or any(np.may_share_memory(residual, a) for a in (dy, xhat)))):
            return None
        ffi = module.ffi
        ptrs = [pointer(ffi, a) for a in arrays]
        res = pointer(ffi, residual)
        return module.lib.layernorm_bprop, (*ptrs[:4], res, *ptrs[4:],
                                            self._norm_work(module, dy.dtype, *dy.shape),
                                            dy.shape[0], dy.shape[1])


class CPUNormOps:
    """The norm ops of the CPU backend: the C kernels, else the numpy reference."""

    def batchnorm_fprop(self, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                        eps=1e-5, momentum=0.9, inference=False, relu=False):
        arrays = tuple(map(_ary, (x, gamma, beta, y, xhat, mean, invstd, running_mean,
                                  running_var)))
        if not self.kernels.batchnorm_fprop(*arrays, eps, momentum, inference, relu):
            reference.batchnorm_fprop(*arrays, eps, momentum, inference)
            if relu:
                np.maximum(arrays[3], 0, out=arrays[3])

    def batchnorm_moments(self, x):
        check_rank("batchnorm_moments", "x", x, 2)
        C = x.shape[-1]
        mean, m2 = np.empty(C), np.empty(C)
        if self.kernels.batchnorm_moments(x._ary, mean, m2):
            return mean, m2
        return reference.batchnorm_moments(x._ary)

    def batchnorm_apply(self, x, gamma, beta, y, xhat, mean, invstd, relu=False):
        arrays = tuple(map(_ary, (x, gamma, beta, y, xhat, mean, invstd)))
        if not self.kernels.batchnorm_apply(*arrays, relu):
            reference.batchnorm_apply(*arrays)
            if relu:
                np.maximum(arrays[3], 0, out=arrays[3])

    def batchnorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, beta_acc=0.0, y=None):
        arrays = tuple(map(_ary, (dy, xhat, invstd, gamma, dx, dgamma, dbeta)))
        mask = None if y is None else y._ary
        if not self.kernels.batchnorm_bprop(*arrays, beta_acc, mask):
            if mask is not None:
                arrays = (arrays[0] * (mask > 0),) + arrays[1:]
            reference.batchnorm_bprop(*arrays, beta_acc)

    def layernorm_fprop(self, x, gamma, beta, y, xhat, invstd, eps=1e-5, residual=None,
                        total=None):
        tensors = (x, gamma, beta, y, xhat, invstd, residual, total)
        arrays = tuple(None if t is None else _ary(t) for t in tensors)
        if not self.kernels.layernorm_fprop(*arrays[:6], eps, *arrays[6:],
                                            keep=all_kept(tensors)):
            reference.layernorm_fprop(*arrays[:6], eps, *arrays[6:])

    def layernorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None):
        tensors = (dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual)
        arrays = tuple(None if t is None else _ary(t) for t in tensors)
        if not self.kernels.layernorm_bprop(*arrays, keep=all_kept(tensors)):
            reference.layernorm_bprop(*arrays)
