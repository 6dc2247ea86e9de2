"""The op table's rows of normalizations (``table.py`` says what a row holds). Dispatched by the
table: layer norm and batch norm's ``batchnorm_fprop`` (the training or inference C function,
chosen by ``inference``), ``batchnorm_apply`` and ``batchnorm_bprop`` on the CPU
(``kernels/cpu/norm.c``; the GPU backend launches them from its column-sum plans in
``gpu/norm.py``), RMSNorm (``kernels/cpu/rmsnorm.c``, ``kernels/cuda/norm.cu``) and local
response normalization (``kernels/cpu/lrn.c``, ``kernels/cuda/lrn.cu``).
``batchnorm_moments`` (host statistics) stays in the section files.

Costs per element of x: batch and layer norm 8 forward (mean, variance, normalize, scale and
shift; 9 with layer norm's residual add), 4 for ``batchnorm_apply``, and 12 backward; RMSNorm 4
forward (square and sum, scale, gain; 5 with the residual add) and 7 backward; LRN
``2 * depth + 4`` forward (the window's squares and sums, the power, the product) and
``2 * depth + 8`` backward."""
import numpy as np

from ..operand_shapes import check_rows_alike
from ..operand_sizes import check_operand_sizes
from ..reference import lrn, norm
from .costs import nbytes, per_element, size
from .table import Kernel, Launch, Op, Operand, Scalar


def _lrn_fprop_cost(x, y, scale, depth, alpha=None, beta=None, k=None):
    return float((2 * depth + 4) * size(x)), nbytes(x, y, scale)


def _lrn_bprop_cost(x, scale, dy, dx, depth, alpha=None, beta=None):
    return float((2 * depth + 8) * size(x)), nbytes(x, scale, dy, dx)


def _rows_alike(op, **operands):
    check_rows_alike(op, 2, **operands)


def _rmsnorm_fprop_cost(x, gamma, y, xhat, rstd, eps=None, residual=None, total=None):
    per = 4 if residual is None else 5
    return float(per * size(x)), nbytes(x, gamma, y, xhat, rstd, residual, total)


def _rmsnorm_bprop_cost(dy, xhat, rstd, gamma, dx, dgamma, residual=None):
    return float(7 * size(dy)), nbytes(dy, xhat, rstd, gamma, dx, dgamma, residual)


def _rms_fprop_check(op, x, gamma, y, xhat, rstd, residual, total):
    check_operand_sizes(op, x, x.shape[-1] if len(x.shape) else 1,
                        whole=(("y", y), ("xhat", xhat), ("residual", residual),
                               ("total", total)), rows=(("rstd", rstd),),
                        columns=(("gamma", gamma),))


def _rms_bprop_check(op, dy, xhat, rstd, gamma, dx, dgamma, residual):
    check_operand_sizes(op, dy, dy.shape[-1] if len(dy.shape) else 1,
                        whole=(("xhat", xhat), ("dx", dx), ("residual", residual)),
                        rows=(("rstd", rstd),), columns=(("gamma", gamma), ("dgamma", dgamma)))


def _bn_fprop_cost(x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var, eps=None,
                   momentum=None, inference=False, relu=False):
    return float(8 * size(x)), nbytes(x, gamma, beta, y, xhat, mean, invstd, running_mean,
                                       running_var)


def _bn_fprop_check(op, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var):
    check_operand_sizes(op, x, x.shape[-1], whole=(("y", y), ("xhat", xhat)),
                        columns=(("gamma", gamma), ("beta", beta), ("mean", mean),
                                 ("invstd", invstd), ("running_mean", running_mean),
                                 ("running_var", running_var)))


def _bn_apply_cost(x, gamma, beta, y, xhat, mean, invstd, relu=False):
    return float(4 * size(x)), nbytes(x, gamma, beta, y, xhat, mean, invstd)


def _bn_bprop_cost(dy, xhat, invstd, gamma, dx, dgamma, dbeta, beta_acc=0.0, y=None):
    return float(12 * size(dy)), nbytes(dy, xhat, invstd, gamma, dx, dgamma, dbeta, y)


def _ln_fprop_cost(x, gamma, beta, y, xhat, invstd, eps=None, residual=None, total=None):
    per = 8 if residual is None else 9
    return float(per * size(x)), nbytes(x, gamma, beta, y, xhat, invstd, residual, total)


def _ln_bprop_cost(dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None):
    return float(12 * size(dy)), nbytes(dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual)


def _width(x):
    return x.shape[-1] if len(x.shape) else 1


def _ln_fprop_check(op, x, gamma, beta, y, xhat, invstd, residual, total):
    check_operand_sizes(op, x, _width(x), whole=(("y", y), ("xhat", xhat),
                                                 ("residual", residual), ("total", total)),
                        rows=(("invstd", invstd),), columns=(("gamma", gamma), ("beta", beta)))


def _ln_fprop_takes(x, gamma, beta, y, xhat, invstd, residual, total, eps):
    """The C kernel joins a residual of x's shape into a ``total`` apart from every input."""
    return residual is None or (
        residual.shape == x.shape == total.shape
        and not any(np.may_share_memory(total, a) for a in (x, gamma, beta, y, xhat, invstd,
                                                            residual) if a is not None))


def _ln_bprop_check(op, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual):
    check_operand_sizes(op, dy, _width(dy), whole=(("xhat", xhat), ("dx", dx),
                                                   ("residual", residual)),
                        rows=(("invstd", invstd),),
                        columns=(("gamma", gamma), ("dgamma", dgamma), ("dbeta", dbeta)))


def _ln_bprop_takes(dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual):
    """The C kernel adds a residual of dx's shape apart from dy and xhat."""
    return residual is None or (residual.shape == dx.shape and not any(
        np.may_share_memory(residual, a) for a in (dy, xhat)))


def _bn_apply_check(op, x, gamma, beta, y, xhat, mean, invstd):
    check_operand_sizes(op, x, x.shape[-1], whole=(("y", y), ("xhat", xhat)),
                        columns=(("gamma", gamma), ("beta", beta), ("mean", mean),
                                 ("invstd", invstd)))


def _bn_bprop_check(op, dy, xhat, invstd, gamma, dx, dgamma, dbeta, y):
    check_operand_sizes(op, dy, dy.shape[-1], whole=(("xhat", xhat), ("dx", dx), ("y", y)),
                        columns=(("invstd", invstd), ("gamma", gamma), ("dgamma", dgamma),
                                 ("dbeta", dbeta)))


F = "norm"
_ROWS_MD, _ROW, _COLUMN = ("M", "D"), (1, "D"), ("M", 1)
_ROWS_MC, _ROW_C = ("M", "C"), (1, "C")
_BN_FPROP = ("x", "gamma", "beta", "y", "xhat", "mean", "invstd", "running_mean", "running_var")
_LRN_SCALARS = (Scalar("depth", "int", sample=5), Scalar("alpha", sample=1e-3),
                Scalar("beta", sample=0.75))
ROWS = (
    Op("batchnorm_fprop", F,
       "Batch norm over every axis but the last (channels).  x, y, xhat: (M, C) views (NHWC "
       "images reshaped to (N*H*W, C)); gamma, beta, mean, invstd, running_mean, running_var: "
       "(1, C).  Training mode normalizes with the batch statistics and updates running_* as "
       "``r = momentum * r + (1 - momentum) * stat`` (running_var takes the unbiased batch "
       "variance); inference uses the running statistics.  ``relu``: y = max(y, 0), the "
       "following ReLU fused into the same pass.", _bn_fprop_cost,
       operands=(Operand("x", _ROWS_MC), Operand("gamma", _ROW_C), Operand("beta", _ROW_C),
                 Operand("y", _ROWS_MC, written=True), Operand("xhat", _ROWS_MC, written=True),
                 Operand("mean", _ROW_C, written=True), Operand("invstd", _ROW_C, written=True),
                 Operand("running_mean", _ROW_C, written=True, updated=True),
                 Operand("running_var", _ROW_C, written=True, updated=True, positive=True)),
       scalars=(Scalar("eps", default=1e-5), Scalar("momentum", default=0.9),
                Scalar("inference", "int", default=False),
                Scalar("relu", "int", default=False, sample=True)),
       check=_bn_fprop_check, reference=norm.batchnorm_fprop,
       kernel=Kernel("norm", "batchnorm_fprop_train", cuda_variant="norm",
                     choose_by="inference", choices={
                         False: Kernel("norm", "batchnorm_fprop_train", work="norm",
                                       arguments=_BN_FPROP + ("work", "sizes", "eps",
                                                              "momentum", "relu"),
                                       bf16_symbol="batchnorm_fprop_train_bf16"),
                         True: Kernel("norm", "batchnorm_fprop_infer",
                                      arguments=_BN_FPROP + ("sizes", "eps", "relu"))}),
       cuda_functions=("norm:nl_colsum2", "norm:nl_bn_stats", "norm:nl_bn_apply"),
       sample={"M": 12, "C": 9}),
    Op("batchnorm_moments", F, "per-channel mean and squared deviations of x (M, C)",
       per_element(3, 0), operands=(Operand("x"),), reference=norm.batchnorm_moments,
       c_symbols=("norm:batchnorm_moments",), cuda_functions=("norm:nl_colsum2",)),
    Op("batchnorm_apply", F,
       "Normalize with given statistics as training-mode ``batchnorm_fprop`` does with its "
       "own: xhat = (x - mean) * invstd, y = gamma * xhat + beta (then max(y, 0) with "
       "``relu``).  x, y, xhat (M, C); gamma, beta, mean, invstd (1, C).", _bn_apply_cost,
       operands=(Operand("x", _ROWS_MC), Operand("gamma", _ROW_C), Operand("beta", _ROW_C),
                 Operand("y", _ROWS_MC, written=True), Operand("xhat", _ROWS_MC, written=True),
                 Operand("mean", _ROW_C), Operand("invstd", _ROW_C, positive=True)),
       scalars=(Scalar("relu", "int", default=False, sample=True),), check=_bn_apply_check,
       reference=norm.batchnorm_apply,
       kernel=Kernel("norm", "batchnorm_apply", cuda_variant="norm"),
       cuda_functions=("norm:nl_bn_apply",), sample={"M": 12, "C": 9}),
    Op("batchnorm_bprop", F,
       "Gradients of training-mode batch norm: dx (M, C) (= beta_acc * dx + the gradient), "
       "dgamma and dbeta (1, C) (accumulated into).  ``y``, the output of a fprop with "
       "``relu``, masks dy by y > 0 (the ReLU's backward fused).", _bn_bprop_cost,
       operands=(Operand("dy", _ROWS_MC), Operand("xhat", _ROWS_MC),
                 Operand("invstd", _ROW_C, positive=True), Operand("gamma", _ROW_C),
                 Operand("dx", _ROWS_MC, written=True, updated=True),
                 Operand("dgamma", _ROW_C, written=True, updated=True),
                 Operand("dbeta", _ROW_C, written=True, updated=True),
                 Operand("y", _ROWS_MC, optional=True, trailing=True)),
       scalars=(Scalar("beta_acc", default=0.0),), check=_bn_bprop_check,
       reference=norm.batchnorm_bprop,
       kernel=Kernel("norm", "batchnorm_bprop", cuda_variant="norm", work="norm",
                     arguments=("dy", "xhat", "invstd", "gamma", "dx", "dgamma", "dbeta",
                                "work", "sizes", "beta_acc", "y"),
                     bf16_symbol="batchnorm_bprop_bf16"),
       cuda_functions=("norm:nl_colsum2", "norm:nl_colsum_finish", "norm:nl_bn_bprop"),
       sample={"M": 12, "C": 9}),
    Op("layernorm_fprop", F,
       "Layer norm over the last axis: x, y, xhat (M, D); gamma, beta (1, D); invstd (M, 1).  "
       "With ``residual`` and ``total`` (M, D), total (sharing no memory with the others) = x "
       "+ residual is written and normalized in x's place (a residual add joined in).  "
       "``xhat`` (what ``layernorm_bprop`` needs) may be None in inference: not kept.",
       _ln_fprop_cost,
       operands=(Operand("x", _ROWS_MD), Operand("gamma", _ROW), Operand("beta", _ROW),
                 Operand("y", _ROWS_MD, written=True),
                 Operand("xhat", _ROWS_MD, written=True, optional=True),
                 Operand("invstd", _COLUMN, written=True),
                 Operand("residual", _ROWS_MD, optional=True, trailing=True, pair="total"),
                 Operand("total", _ROWS_MD, written=True, optional=True, trailing=True,
                         pair="residual")),
       scalars=(Scalar("eps", default=1e-5),), check=_ln_fprop_check,
       reference=norm.layernorm_fprop,
       kernel=Kernel("norm", "layernorm_fprop", cuda_variant="norm", takes=_ln_fprop_takes,
                     bf16_symbol="layernorm_fprop_bf16"),
       cuda_functions=("norm:nl_ln_fprop",), sample={"M": 6, "D": 40},
       backward="layernorm_bprop"),
    Op("layernorm_bprop", F,
       "dx (M, D) and parameter gradients dgamma, dbeta (1, D) (accumulated into).  With "
       "``residual`` (M, D), sharing no memory with the others, dx = residual + the input "
       "gradient (a residual branch's gradient joined in, in one pass where the backend can).",
       _ln_bprop_cost,
       operands=(Operand("dy", _ROWS_MD), Operand("xhat", _ROWS_MD),
                 Operand("invstd", _COLUMN, positive=True), Operand("gamma", _ROW),
                 Operand("dx", _ROWS_MD, written=True),
                 Operand("dgamma", _ROW, written=True, updated=True),
                 Operand("dbeta", _ROW, written=True, updated=True),
                 Operand("residual", _ROWS_MD, optional=True, trailing=True)),
       check=_ln_bprop_check, reference=norm.layernorm_bprop,
       kernel=Kernel("norm", "layernorm_bprop", cuda_variant="norm", work="norm",
                     arguments=("dy", "xhat", "invstd", "gamma", "residual", "dx", "dgamma",
                                "dbeta", "work", "sizes"), takes=_ln_bprop_takes,
                     bf16_symbol="layernorm_bprop_bf16"),
       cuda_functions=("norm:nl_ln_bprop", "norm:nl_colsum2", "norm:nl_colsum_finish"),
       sample={"M": 6, "D": 40}),
    Op("rmsnorm_fprop", F,
       "RMSNorm over the last axis of rows x (M, D): rstd (M, 1) = 1 / sqrt(mean(x^2) + eps), "
       "xhat = x * rstd (None: not kept), y = gamma * xhat; with ``residual`` and ``total`` "
       "(M, D), total = x + residual is written and normalized in x's place.",
       _rmsnorm_fprop_cost,
       operands=(Operand("x", _ROWS_MD), Operand("gamma", _ROW),
                 Operand("y", _ROWS_MD, written=True),
                 Operand("xhat", _ROWS_MD, written=True, optional=True),
                 Operand("rstd", _COLUMN, written=True),
                 Operand("residual", _ROWS_MD, optional=True, trailing=True, pair="total"),
                 Operand("total", _ROWS_MD, written=True, optional=True, trailing=True,
                         pair="residual")),
       scalars=(Scalar("eps", default=1e-5),), check=_rms_fprop_check,
       reference=norm.rmsnorm_fprop,
       kernel=Kernel("rmsnorm", "rmsnorm_fprop", "norm", (Launch("nl_rms_fprop", "rows"),),
                     bf16_symbol="rmsnorm_fprop_bf16"),
       sample={"M": 6, "D": 40}, backward="rmsnorm_bprop"),
    Op("rmsnorm_bprop", F,
       "dx (M, D) = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma (plus ``residual`` "
       "when given), and dgamma (1, D) += the sum over rows of dy * xhat.",
       _rmsnorm_bprop_cost,
       operands=(Operand("dy", _ROWS_MD), Operand("xhat", _ROWS_MD),
                 Operand("rstd", _COLUMN, positive=True), Operand("gamma", _ROW),
                 Operand("dx", _ROWS_MD, written=True),
                 Operand("dgamma", _ROW, written=True, updated=True),
                 Operand("residual", _ROWS_MD, optional=True, trailing=True)),
       check=_rms_bprop_check, reference=norm.rmsnorm_bprop,
       kernel=Kernel("rmsnorm", "rmsnorm_bprop", "norm",
                     (Launch("nl_rms_bprop", "rows"), Launch("nl_rms_dgamma", "columns")),
                     bf16_symbol="rmsnorm_bprop_bf16"),
       sample={"M": 6, "D": 40}),
    Op("lrn_fprop", F,
       "Across the channels of rows x (M, C) (NHWC images as (N*H*W, C)): scale (M, C) = k + "
       "alpha / depth * sum of x^2 over channels c - depth//2 .. c + (depth-1)//2, y = x * "
       "scale^-beta (``backends/reference/lrn.py`` is the reference).", _lrn_fprop_cost,
       operands=(Operand("x", _ROWS_MC), Operand("y", _ROWS_MC, written=True),
                 Operand("scale", _ROWS_MC, written=True)),
       scalars=_LRN_SCALARS + (Scalar("k", sample=2.0),), check=_rows_alike,
       reference=lrn.lrn_fprop,
       kernel=Kernel("lrn", "lrn_fprop", "lrn", (Launch("nl_lrn_fprop"),)),
       sample={"M": 12, "C": 9}, backward="lrn_bprop"),
    Op("lrn_bprop", F, "dx (M, C), the gradient of ``lrn_fprop`` from its input x and "
       "``scale``.", _lrn_bprop_cost,
       operands=(Operand("x", _ROWS_MC), Operand("scale", _ROWS_MC, positive=True),
                 Operand("dy", _ROWS_MC), Operand("dx", _ROWS_MC, written=True)),
       scalars=_LRN_SCALARS, check=_rows_alike, reference=lrn.lrn_bprop,
       kernel=Kernel("lrn", "lrn_bprop", "lrn", (Launch("nl_lrn_bprop"),)),
       sample={"M": 12, "C": 9}),
)
