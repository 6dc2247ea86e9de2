"""Batch norm and layer norm on the GPU (``Backend.batchnorm_*``, ``layernorm_*``): the kernels
of ``kernels/cuda/norm.cu``, launched from this file's column-sum plans after the op table
row's operand check (``ops/norm.py``: the rows the table dispatches on the CPU).

Batch norm (x (M, C), NHWC images as (N*H*W, C)): a column-sum kernel over row slices writes
float32 partials, a finalize kernel sums them in slice order into the statistics (and the
running averages), an elementwise kernel normalizes and applies the following ReLU when asked
(``relu=True``: the activation fused).  bprop runs the column sums of (dy, dy * xhat) (masked by
y > 0 when the ReLU was fused) and one elementwise kernel for dx.  Layer norm (x (M, D)) runs
one block per row in both directions; its dgamma/dbeta are the same column sums.  Every
reduction has a fixed order:
deterministic.  Inputs that are not contiguous are copied to contiguous work tensors first.
"""
from dataclasses import dataclass

import numpy as np

from ..operand_sizes import check_contiguous, check_rank
from ..ops import OPS
from .dense import rows_of


@dataclass(frozen=True)
class ColumnPlan:
    """Grid of ``nl_colsum2`` over (M, C): 32 columns x one slice of ``rows_per_split`` rows
    per block of (32, 8) threads."""
    grid: tuple
    block: tuple
    splits: int
    rows_per_split: int


def column_plan(M, C, max_splits):
    """Split M rows into at most ``max_splits`` slices of at least 64 rows (at least one)."""
    splits = max(1, min(int(max_splits), -(-M // 64)))
    per = max(1, -(-M // splits))
    splits = max(1, -(-M // per))
    return ColumnPlan((-(-C // 32), splits), (32, 8, 1), splits, per)


def row_grid(M, max_blocks):
    """Grid of the one-block-per-row kernels (they stride over the rows)."""
    return (max(1, min(int(M), int(max_blocks))), 1)


class GPUNormOps:
    """Methods of :class:`~neonlite.backends.gpu.backend.GPUBackend` for normalization."""

    def _column_sums(self, u, v, w, mode, key):
        M, C = u.shape[0], u.shape[-1]
        plan = column_plan(M, C, max(1, 2 * self.device.sm_count // -(-C // 32)))
        partial = self.scratch(("colsum", key, plan.splits, C), (plan.splits * C * 2,))
        func = self.kernel("norm", f"nl_colsum2_{u.storage}", "PPPPiiii")
        self.device.launch(func, plan.grid, plan.block,
                           [u.ptr, 0 if v is None else v.ptr, 0 if w is None else w.ptr,
                            partial.ptr, mode, M, C, plan.rows_per_split])
        return plan, partial

    def _elementwise_grid(self, n):
        return (self.device.blocks(n), 1), (256, 1, 1)

    # ---- batch norm ------------------------------------------------------------------------
    def batchnorm_fprop(self, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                        eps=1e-5, momentum=0.9, inference=False, relu=False):
        """As the contract; ``relu=True`` also applies the following ReLU to y (fused)."""
        check_contiguous("batchnorm_fprop", y=y, xhat=xhat, mean=mean, invstd=invstd,
                      running_mean=running_mean, running_var=running_var)
        OPS["batchnorm_fprop"].check_operands(
            (x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var),
            (eps, momentum, inference, relu))
        x, gamma, beta = rows_of(self, "batchnorm_fprop", x, gamma, beta)
        M, C = x.shape
        storage = x.storage
        if inference:
            mean[:] = running_mean
            invstd[:] = self.rsqrt(running_var + eps)
        else:
            plan, partial = self._column_sums(x, None, None, 0, "bn")
            func = self.kernel("norm", f"nl_bn_stats_{storage}", "PPPPPPiiiff")
            self.device.launch(func, *self._elementwise_grid(C),
                               [partial.ptr, x.ptr, mean.ptr, invstd.ptr, running_mean.ptr,
                                running_var.ptr, M, C, plan.splits, np.float32(eps),
                                np.float32(momentum)])
        func = self.kernel("norm", f"nl_bn_apply_{storage}", "PPPPPPPqii")
        self.device.launch(func, *self._elementwise_grid(M * C),
                           [x.ptr, mean.ptr, invstd.ptr, gamma.ptr, beta.ptr, xhat.ptr, y.ptr,
                            M, C, int(bool(relu))])

    def batchnorm_moments(self, x):
        """As the contract: the float32 partial column sums (shifted by row 0) of
        ``nl_colsum2`` are copied back (splits x C x 2 numbers) and added in float64."""
        check_rank("batchnorm_moments", "x", x, 2)
        (x,) = rows_of(self, "batchnorm_moments", x)
        M, C = x.shape
        plan, partial = self._column_sums(x, None, None, 0, "bn_moments")
        sums = partial.get().astype(np.float64).reshape(plan.splits, C, 2).sum(axis=0)
        s1, s2 = sums[:, 0], sums[:, 1]
        shift = x[0:1].get().reshape(-1).astype(np.float64)
        return shift + s1 / M, np.maximum(s2 - s1 * (s1 / M), 0.0)

    def batchnorm_apply(self, x, gamma, beta, y, xhat, mean, invstd, relu=False):
        """As the contract (the ``nl_bn_apply`` kernel of ``batchnorm_fprop``)."""
        check_contiguous("batchnorm_apply", y=y, xhat=xhat)
        OPS["batchnorm_apply"].check_operands((x, gamma, beta, y, xhat, mean, invstd), (relu,))
        x, gamma, beta, mean, invstd = rows_of(self, "batchnorm_apply", x, gamma, beta, mean,
                                               invstd)
        M, C = x.shape
        func = self.kernel("norm", f"nl_bn_apply_{x.storage}", "PPPPPPPqii")
        self.device.launch(func, *self._elementwise_grid(M * C),
                           [x.ptr, mean.ptr, invstd.ptr, gamma.ptr, beta.ptr, xhat.ptr, y.ptr,
                            M, C, int(bool(relu))])

    def batchnorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, beta_acc=0.0, y=None):
        """As the contract; ``y`` (the fused fprop's ReLU output) masks dy by y > 0."""
        check_contiguous("batchnorm_bprop", dx=dx, dgamma=dgamma, dbeta=dbeta)
        OPS["batchnorm_bprop"].check_operands((dy, xhat, invstd, gamma, dx, dgamma, dbeta, y),
                                              (beta_acc,))
        dy, xhat, invstd, gamma, y = rows_of(self, "batchnorm_bprop", dy, xhat, invstd, gamma, y)
        M, C = dy.shape
        plan, partial = self._column_sums(dy, xhat, y, 1, "bn_bprop")
        sums = self.scratch(("bn_sums", C), (2 * C,))
        func = self.kernel("norm", f"nl_colsum_finish_{dy.storage}", "PPPPii")
        self.device.launch(func, *self._elementwise_grid(C),
                           [partial.ptr, sums.ptr, dbeta.ptr, dgamma.ptr, C, plan.splits])
        func = self.kernel("norm", f"nl_bn_bprop_{dy.storage}", "PPPPPPPqif")
        self.device.launch(func, *self._elementwise_grid(M * C),
                           [dy.ptr, 0 if y is None else y.ptr, xhat.ptr, invstd.ptr, gamma.ptr,
                            sums.ptr, dx.ptr, M, C, np.float32(beta_acc)])

    # ---- layer norm ------------------------------------------------------------------------
    def layernorm_fprop(self, x, gamma, beta, y, xhat, invstd, eps=1e-5, residual=None,
                        total=None):
        check_contiguous("layernorm_fprop", y=y, xhat=xhat, invstd=invstd)
        OPS["layernorm_fprop"].check_operands((x, gamma, beta, y, xhat, invstd, residual, total),
                                              (eps,))
        if residual is not None:
            total[:] = x + residual
            x = total
        x, gamma, beta = rows_of(self, "layernorm_fprop", x, gamma, beta)
        M, D = x.shape
        if xhat is None:  # not kept (inference): the kernel writes it to a work tensor
            xhat = self.scratch(("ln_xhat", M, D), (M, D), x.dtype)
        func = self.kernel("norm", f"nl_ln_fprop_{x.storage}", "PPPPPPiif")
        self.device.launch(func, row_grid(M, self.device.sm_count * 32), (256, 1, 1),
                           [x.ptr, gamma.ptr, beta.ptr, y.ptr, xhat.ptr, invstd.ptr, M, D,
                            np.float32(eps)])

    def layernorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None):
        check_contiguous("layernorm_bprop", dx=dx, dgamma=dgamma, dbeta=dbeta)
        OPS["layernorm_bprop"].check_operands((dy, xhat, invstd, gamma, dx, dgamma, dbeta,
                                               residual))
        dy, xhat, invstd, gamma = rows_of(self, "layernorm_bprop", dy, xhat, invstd, gamma)
        M, D = dy.shape
        func = self.kernel("norm", f"nl_ln_bprop_{dy.storage}", "PPPPPii")
        self.device.launch(func, row_grid(M, self.device.sm_count * 32), (256, 1, 1),
                           [dy.ptr, xhat.ptr, invstd.ptr, gamma.ptr, dx.ptr, M, D])
        plan, partial = self._column_sums(dy, xhat, None, 1, "ln_bprop")
        sums = self.scratch(("ln_sums", D), (2 * D,))
        func = self.kernel("norm", f"nl_colsum_finish_{dy.storage}", "PPPPii")
        self.device.launch(func, *self._elementwise_grid(D),
                           [partial.ptr, sums.ptr, dbeta.ptr, dgamma.ptr, D, plan.splits])
        if residual is not None:
            dx[:] = dx + residual

    # ---- softmax ---------------------------------------------------------------------------
