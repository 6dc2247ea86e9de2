"""The op table's rows of elementwise work, gathers and random draws (``table.py`` says what a row
holds). GELU is dispatched by the table on the CPU (``kernels/cpu/gelu.c``); the GPU backend
runs it as op-trees its code generator fuses (``gpu/gelu.py``). Costs: GELU 10 per element
forward, 14 backward; an op-tree one FLOP per operator node per output element
(``costs.optree_cost``); gathers, permutes and draws none, scatter-add one per element."""
from ..operand_sizes import check_operand_sizes
from ..reference import gelu, rows
from ..shared.gelu import APPROXIMATIONS
from .costs import nbytes, no_flops, optree_cost, size
from .table import Kernel, Op, Operand, Scalar


def _gelu(x, out, bias=None, pre=None, approximate="none"):
    return 10.0 * size(x), nbytes(x, out, bias) + (nbytes(pre) if pre is not None else 0.0)


def _gelu_bprop(x, dy, dx, dbias=None, approximate="none", y=None):
    return 14.0 * size(x), nbytes(x, dy, dx, dbias, y)


def _width(x):
    return x.shape[-1] if len(x.shape) else 1


def _gelu_check(op, x, out, bias, pre):
    check_operand_sizes(op, x, _width(x), whole=(("out", out), ("pre", pre)),
                        columns=(("bias", bias),))


def _gelu_bprop_check(op, x, dy, dx, dbias, y):
    check_operand_sizes(op, x, _width(x), whole=(("dy", dy), ("dx", dx), ("y", y)),
                        columns=(("dbias", dbias),))


def _has_rows(x, *rest):
    return len(x.shape) > 0


def _scatter_add_rows(grad_table, ids, rows):
    return float(size(rows)), nbytes(ids, rows) + 2.0 * nbytes(rows)


def _execute(out, optree):
    return optree_cost(out, optree)


def _execute_multi(assignments):
    costs = [optree_cost(out, tree) for out, tree in assignments]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


F = "elementwise"
_ROWS = ("M", "D")
_APPROXIMATE = Scalar("approximate", "int", default="none", sample="tanh",
                      codes={name: i for i, name in enumerate(APPROXIMATIONS)})
ROWS = (
    Op("execute", F, "out[...] = an op-tree", _execute,
       c_symbols=("optree:optree_run_multi",), cuda_functions=("codegen:generated",)),
    Op("execute_multi", F, "several op-tree assignments in one pass", _execute_multi,
       c_symbols=("optree:optree_run_multi",), cuda_functions=("codegen:generated",)),
    Op("gelu", F,
       "out = gelu(x + bias) over x (..., D) with bias (D,) or None; ``pre`` (x's shape; may "
       "be ``x``) receives x + bias (x without a bias), the input ``gelu_bprop`` needs, or is "
       "None (inference: the sum is not kept).  ``approximate``: ``\"none\"`` (erf form) or "
       "``\"tanh\"``.", _gelu,
       operands=(Operand("x", _ROWS), Operand("out", _ROWS, written=True),
                 Operand("bias", ("D",), optional=True),
                 Operand("pre", _ROWS, written=True, optional=True)),
       scalars=(_APPROXIMATE,), check=_gelu_check, reference=gelu.gelu,
       kernel=Kernel("gelu", "gelu_fprop", cuda_variant="codegen",
                     arguments=("x", "bias", "pre", "out", "sizes", "approximate"),
                     takes=_has_rows, bf16_symbol="gelu_fprop_bf16"),
       cuda_functions=("codegen:generated",), sample={"M": 6, "D": 13},
       backward="gelu_bprop", loss_of="out", gradients=(("dx", "x"),)),
    Op("gelu_bprop", F,
       "dx = dy * gelu'(x) (x the pre-activation; ``dx`` may be ``dy``); ``dbias`` (D,), "
       "when given, accumulates the sum of dx over every axis but the last.  ``y``, the "
       "forward output gelu(x) when at hand, lets a backend skip recomputing Phi(x) = y / x.",
       _gelu_bprop,
       operands=(Operand("x", _ROWS), Operand("dy", _ROWS), Operand("dx", _ROWS, written=True),
                 Operand("dbias", ("D",), written=True, optional=True, updated=True),
                 Operand("y", _ROWS, optional=True, trailing=True)),
       scalars=(_APPROXIMATE,), check=_gelu_bprop_check, reference=gelu.gelu_bprop,
       kernel=Kernel("gelu", "gelu_bprop", cuda_variant="codegen", work="gelu_bprop",
                     arguments=("x", "y", "dy", "dx", "dbias", "work", "sizes",
                                "approximate"), takes=_has_rows, bf16_symbol="gelu_bprop_bf16"),
       cuda_functions=("codegen:generated",), sample={"M": 6, "D": 13}),
    Op("take_rows", F, "out[i] = table[ids[i]]", no_flops(1, 2),
       operands=(Operand("table"), Operand("ids"), Operand("out", written=True)),
       reference=rows.take_rows,
       c_symbols=("rows:take_rows",), cuda_functions=("rows:nl_take_rows",)),
    Op("scatter_add_rows", F, "grad_table[ids[i]] += rows[i]", _scatter_add_rows,
       operands=(Operand("grad_table", written=True, updated=True), Operand("ids"),
                 Operand("rows")),
       reference=rows.scatter_add_rows, c_symbols=("rows:scatter_add_rows",),
       cuda_functions=("rows:nl_scatter_add_rows",)),
    Op("permute_axes", F, "out = x transposed by axes", no_flops(0, 1),
       operands=(Operand("x"), Operand("out", written=True)),
       c_symbols=("rows:copy_rows",), cuda_functions=("transpose:nl_transpose_b32",)),
    Op("uniform", F, "out = uniform draws in [low, high)", no_flops(0),
       operands=(Operand("out", written=True),),
       cuda_functions=("philox:nl_uniform",)),
    Op("dropout_mask", F, "mask = (uniform < keep)", no_flops(0),
       operands=(Operand("mask", written=True),),
       cuda_functions=("philox:nl_uniform",)),
    Op("example_dropout_mask", F, "a dropout mask from each example's Philox stream",
       no_flops(0), operands=(Operand("mask", written=True),),
       cuda_functions=("philox:nl_example_mask",)),
)
