"""The op table's rows of block-sparse products and softmax (``table.py`` says what a row
holds); the plans (``cpu/blocksparse.py``, ``gpu/blocksparse.py``) choose the loops, and
both backends run these rows' check (``check_blocksparse``: the plan, then the operands) before
them and the CPU backend their reference where its kernels do not take the arrays.  Costs
count only stored blocks: ``2 * M * nnz * bs * bs`` per product pass, softmax 5 per element
(its gradient 4).  The references are those of ``reference/blocksparse.py`` (which walk the
plan's lookup tables) written into the contract's outputs."""
from ..operand_shapes import check_blocksparse
from ..reference import blocksparse as reference
from .costs import nbytes, size
from .table import Op


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


F = "blocksparse"
_CUDA = "blocksparse:nl_bs_"
ROWS = (
    Op("blocksparse_fprop", F, "y = x @ W (W block-sparse)", _fprop,
       check=check_blocksparse, reference=_fprop_reference,
       c_symbols=("blocksparse:bs_linear_fprop",), cuda_functions=(_CUDA + "product",)),
    Op("blocksparse_bprop", F, "dx (+)= e @ W^T", _bprop,
       check=check_blocksparse, reference=_bprop_reference,
       c_symbols=("blocksparse:bs_linear_bprop",), cuda_functions=(_CUDA + "product",)),
    Op("blocksparse_update", F, "dW (+)= x^T @ e on the stored blocks", _update,
       check=check_blocksparse, reference=_update_reference,
       c_symbols=("blocksparse:bs_linear_update",), cuda_functions=(_CUDA + "update",)),
    Op("blocksparse_sdd", F, "s = alpha * a @ b^T on the stored blocks", _sdd,
       check=check_blocksparse, reference=_sdd_reference,
       c_symbols=("blocksparse:bs_sdd",), cuda_functions=(_CUDA + "sdd",)),
    Op("blocksparse_dsd", F, "o (+)= p @ b (or p^T @ b), p block-sparse", _dsd,
       check=check_blocksparse, reference=_dsd_reference,
       c_symbols=("blocksparse:bs_dsd",), cuda_functions=(_CUDA + "dsd",)),
    Op("blocksparse_softmax", F, "p = softmax of the stored blocks' rows", _softmax,
       check=check_blocksparse, reference=_softmax_reference,
       c_symbols=("blocksparse:bs_softmax",), cuda_functions=(_CUDA + "softmax",)),
    Op("blocksparse_softmax_bprop", F, "ds of blocksparse_softmax", _softmax_bprop,
       check=check_blocksparse, reference=_softmax_bprop_reference,
       c_symbols=("blocksparse:bs_softmax_bprop",), cuda_functions=(_CUDA + "softmax_bprop",)),
)
