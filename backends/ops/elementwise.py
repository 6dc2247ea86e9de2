"""The op table's rows of elementwise work, gathers and random draws (``table.py`` says what a
row holds).  Costs: GELU 10 per element forward, 14 backward; an op-tree one FLOP per operator
node per output element (``costs.optree_cost``); gathers, permutes and draws none,
scatter-add one per element."""
from ..reference import rows
from .costs import nbytes, no_flops, optree_cost, size
from .table import Op


def _gelu(x, out, bias=None, pre=None, approximate="none"):
    return 10.0 * size(x), nbytes(x, out, bias) + (nbytes(pre) if pre is not None else 0.0)


def _gelu_bprop(x, dy, dx, dbias=None, approximate="none", y=None):
    return 14.0 * size(x), nbytes(x, dy, dx, dbias, y)


def _scatter_add_rows(grad_table, ids, rows):
    return float(size(rows)), nbytes(ids, rows) + 2.0 * nbytes(rows)


def _execute(out, optree):
    return optree_cost(out, optree)


def _execute_multi(assignments):
    costs = [optree_cost(out, tree) for out, tree in assignments]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


F = "elementwise"
ROWS = (
    Op("execute", F, "out[...] = an op-tree", _execute,
       c_symbols=("optree:optree_run_multi",), cuda_functions=("codegen:generated",)),
    Op("execute_multi", F, "several op-tree assignments in one pass", _execute_multi,
       c_symbols=("optree:optree_run_multi",), cuda_functions=("codegen:generated",)),
    Op("gelu", F, "out = gelu(x + bias), pre = x + bias kept", _gelu,
       c_symbols=("gelu:gelu_fprop",), cuda_functions=("codegen:generated",),
       backward="gelu_bprop"),
    Op("gelu_bprop", F, "dx = dy * gelu'(x), dbias += its column sums", _gelu_bprop,
       c_symbols=("gelu:gelu_bprop",), cuda_functions=("codegen:generated",)),
    Op("take_rows", F, "out[i] = table[ids[i]]", no_flops(1, 2), reference=rows.take_rows,
       c_symbols=("rows:take_rows",), cuda_functions=("rows:nl_take_rows",)),
    Op("scatter_add_rows", F, "grad_table[ids[i]] += rows[i]", _scatter_add_rows,
       reference=rows.scatter_add_rows, c_symbols=("rows:scatter_add_rows",),
       cuda_functions=("rows:nl_scatter_add_rows",)),
    Op("permute_axes", F, "out = x transposed by axes", no_flops(0, 1),
       c_symbols=("rows:copy_rows",), cuda_functions=("transpose:nl_transpose_b32",)),
    Op("uniform", F, "out = uniform draws in [low, high)", no_flops(0),
       cuda_functions=("philox:nl_uniform",)),
    Op("dropout_mask", F, "mask = (uniform < keep)", no_flops(0),
       cuda_functions=("philox:nl_uniform",)),
    Op("example_dropout_mask", F, "a dropout mask from each example's Philox stream",
       no_flops(0), cuda_functions=("philox:nl_example_mask",)),
)
