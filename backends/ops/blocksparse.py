"""The op table's rows of block-sparse products and softmax (``table.py`` says what a row
holds), dispatched by the table: each takes the plan of ``blocksparse_layer`` first (an
operand with ``plan`` set), runs its check (``check_blocksparse``: the plan, then the
operands), and its kernel's arguments are the plan's (``arguments=PLAN``): the CPU and GPU
section files (``cpu/blocksparse.py``, ``gpu/blocksparse.py``) choose the tables each kernel
walks, its work arrays and its grid.  Costs count only stored blocks: ``2 * M * nnz * bs *
bs`` per product pass, softmax 5 per element (its gradient 4).  The references are those of
``reference/blocksparse.py`` (which walk the plan's lookup tables) written into the
contract's outputs."""
import numpy as np

from ..operand_shapes import check_blocksparse
from ..reference import blocksparse as reference
from .costs import nbytes, size
from .table import PLAN, Kernel, Launch, Op, Operand, Scalar


def _rows(t):
    return size(t) // t.shape[-1]


def _fprop(plan, x, w, y):
    return 2.0 * _rows(x) * plan.nnz * plan.bs * plan.bs, nbytes(x, w, y)


def _bprop(plan, e, w, dx, beta=0.0):
    return 2.0 * _rows(e) * plan.nnz * plan.bs * plan.bs, nbytes(e, w, dx)


def _update(plan, x, e, dw, beta=0.0):
    return 2.0 * _rows(x) * plan.nnz * plan.bs * plan.bs, nbytes(x, e, dw)


def _sdd(plan, a, b, s, alpha=1.0):
    return 2.0 * a.shape[0] * plan.nnz * plan.bs * plan.bs * a.shape[-1], nbytes(a, b, s)


def _dsd(plan, p, b, o, transposed=False, beta=0.0):
    return 2.0 * p.shape[0] * plan.nnz * plan.bs * plan.bs * b.shape[-1], nbytes(p, b, o)


def _softmax(plan, s, p, scale=1.0, causal=False):
    return 5.0 * size(s), nbytes(s, p)


def _softmax_bprop(plan, p, dp, ds, scale=1.0):
    return 4.0 * size(p), nbytes(p, dp, ds)


def _fprop_reference(plan, x, w, y):
    y[...] = reference.linear_fprop(plan.tables, x, w, plan.bs)


def _plus(beta, out):
    """beta * out, or 0 when beta is 0 (out may hold anything then, NaN included)."""
    return beta * out if beta else 0


def _bprop_reference(plan, e, w, dx, beta=0.0):
    dx[...] = reference.linear_bprop(plan.tables, e, w, plan.bs) + _plus(beta, dx)


def _update_reference(plan, x, e, dw, beta=0.0):
    dw[...] = reference.linear_update(plan.tables, x, e, plan.bs) + _plus(beta, dw)


def _sdd_reference(plan, a, b, s, alpha=1.0):
    s[...] = reference.sdd(plan.tables, a, b, plan.bs, alpha)


def _dsd_reference(plan, p, b, o, transposed=False, beta=0.0):
    product = reference.dsd_t if transposed else reference.dsd
    o[...] = product(plan.tables, p, b, plan.bs) + _plus(beta, o)


def _softmax_reference(plan, s, p, scale=1.0, causal=False):
    p[...] = reference.softmax(plan.tables, s, plan.bs, scale, causal)


def _softmax_bprop_reference(plan, p, dp, ds, scale=1.0):
    ds[...] = reference.softmax_bprop(plan.tables, p, dp, scale)


def _weights_plan(make):
    """The plan of the weight rows' sample: 2 x 3 blocks of 8, 4 stored."""
    return make(np.array([[1, 0, 1], [0, 1, 1]], np.uint8), 8)


def _heads_plan(make):
    """The plan of the attention rows' sample: 2 heads of 2 x 2 blocks of 8, 6 stored."""
    return make(np.array([[[1, 1], [0, 1]], [[1, 0], [1, 1]]], np.uint8), 8)


def _kernel(symbol, function, grid_threads=128, arg_format=""):
    return Kernel("blocksparse", symbol, "blocksparse",
                  (Launch(function, "plan", grid_threads, arg_format),), arguments=PLAN)


F = "blocksparse"
_PLAN = Operand("plan", plan="blocksparse_layer")
_BLOCKS = ("NNZ", "BS", "BS")
_SCORES = ("M", "NNZ", "BS", "BS")
#: the weight rows' sample: M rows, R*bs = 16 inputs, C*bs = 24 outputs
_WEIGHTS = {"M": 5, "RB": 16, "CB": 24, "NNZ": 4, "BS": 8}
#: the attention rows' sample: M examples, 2 heads, 16 query and key positions, width 4
_HEADS = {"M": 2, "H": 2, "RB": 16, "CB": 16, "NNZ": 6, "BS": 8, "D": 4}
_BETA = Scalar("beta", default=0.0, sample=0.0)
_SCALE = Scalar("scale", default=1.0, sample=0.5)
ROWS = (
    Op("blocksparse_fprop", F,
       "y (M, C*bs) = x (M, R*bs) @ W for W's stored blocks w (nnz, bs, bs).", _fprop,
       operands=(_PLAN, Operand("x", ("M", "RB")), Operand("w", _BLOCKS),
                 Operand("y", ("M", "CB"), written=True)),
       check=check_blocksparse, reference=_fprop_reference,
       kernel=_kernel("bs_linear_fprop", "nl_bs_product", arg_format="PPPiiiiPPPif"),
       sample=_WEIGHTS, sample_plan=_weights_plan),
    Op("blocksparse_bprop", F,
       "dx (M, R*bs) = e (M, C*bs) @ W^T + beta * dx (walks the transposed layout).", _bprop,
       operands=(_PLAN, Operand("e", ("M", "CB")), Operand("w", _BLOCKS),
                 Operand("dx", ("M", "RB"), written=True)), scalars=(_BETA,),
       check=check_blocksparse, reference=_bprop_reference,
       kernel=_kernel("bs_linear_bprop", "nl_bs_product", arg_format="PPPiiiiPPPif"),
       sample=_WEIGHTS, sample_plan=_weights_plan),
    Op("blocksparse_update", F,
       "dw (nnz, bs, bs) = x^T @ e at the stored blocks only, + beta * dw.", _update,
       operands=(_PLAN, Operand("x", ("M", "RB")), Operand("e", ("M", "CB")),
                 Operand("dw", _BLOCKS, written=True)), scalars=(_BETA,),
       check=check_blocksparse, reference=_update_reference,
       kernel=_kernel("bs_linear_update", "nl_bs_update", arg_format="PPPiiiiPPf"),
       sample=_WEIGHTS, sample_plan=_weights_plan),
    Op("blocksparse_sdd", F,
       "s (N, nnz, bs, bs): s[:, k] = alpha * a[:, h, i] @ b[:, h, j]^T at the stored block "
       "k = (h, i, j) of the layout; a (N, H, R*bs, d), b (N, H, C*bs, d).", _sdd,
       operands=(_PLAN, Operand("a", ("M", "H", "RB", "D")), Operand("b", ("M", "H", "CB", "D")),
                 Operand("s", _SCORES, written=True)),
       scalars=(Scalar("alpha", default=1.0, sample=0.5),),
       check=check_blocksparse, reference=_sdd_reference,
       kernel=_kernel("bs_sdd", "nl_bs_sdd", arg_format="PPPiiiiiiPPPf"),
       sample=_HEADS, sample_plan=_heads_plan),
    Op("blocksparse_dsd", F,
       "o = P @ b + beta * o for sparse P (N, nnz, bs, bs): b (N, H, C*bs, d) and o (N, H, "
       "R*bs, d); ``transposed``: o = P^T @ b with b (N, H, R*bs, d), o (N, H, C*bs, d).", _dsd,
       operands=(_PLAN, Operand("p", _SCORES), Operand("b", ("M", "H", "CB", "D")),
                 Operand("o", ("M", "H", "RB", "D"), written=True)),
       scalars=(Scalar("transposed", "int", default=False, sample=False, checked=True), _BETA),
       check=check_blocksparse, reference=_dsd_reference,
       kernel=_kernel("bs_dsd", "nl_bs_dsd", arg_format="PPPiiiiiiPPPif"),
       sample=_HEADS, sample_plan=_heads_plan),
    Op("blocksparse_softmax", F,
       "p = softmax(scale * s) over each row of the sparse s (N, nnz, bs, bs) (all the stored "
       "blocks of a row together).  ``causal`` hides key positions after the query (key <= "
       "query + Tk - Tq, as ``masked_softmax``).  Hidden entries, and rows with nothing "
       "visible, are 0.  ``p`` may be ``s``.", _softmax,
       operands=(_PLAN, Operand("s", _SCORES), Operand("p", _SCORES, written=True)),
       scalars=(_SCALE, Scalar("causal", "int", default=False, sample=True)),
       check=check_blocksparse, reference=_softmax_reference,
       kernel=_kernel("bs_softmax", "nl_bs_softmax", 64, "PPiiiPPPfi"),
       sample=_HEADS, sample_plan=_heads_plan),
    Op("blocksparse_softmax_bprop", F,
       "ds = scale * p * (dp - rowsum(dp * p)) over the rows of ``blocksparse_softmax``; "
       "``ds`` may be ``dp``.", _softmax_bprop,
       operands=(_PLAN, Operand("p", _SCORES), Operand("dp", _SCORES),
                 Operand("ds", _SCORES, written=True)), scalars=(_SCALE,),
       check=check_blocksparse, reference=_softmax_bprop_reference,
       kernel=_kernel("bs_softmax_bprop", "nl_bs_softmax_bprop", 64, "PPPiiPf"),
       sample=_HEADS, sample_plan=_heads_plan),
)
