"""The CPU backend's shortest path for the commonest op-trees: one or two additions,
subtractions or multiplications of tensors (a residual add, a bias add, a gradient accumulated
into a parameter's gradient), run as numpy ufuncs writing straight into the output.

The op-tree machine (:mod:`.optree`) pays for its generality on every call (walking the tree,
keying the program, gathering addresses and strides in Python, an interpreter in C); a tree of
this shape needs none of it.  Results are those of the machine: each operation is one IEEE
operation of the output's type in both, and a chain of two is evaluated as the machine does,
left to right, ``(a op b) op c`` (a product is never the operand of a second operation here,
so no fused multiply-add can make the machine round differently).

Only outputs of up to ``MAX_ELEMENTS`` elements are taken: numpy's ufuncs run on one thread,
and past that size the machine's pass over all cores (and its single pass for a chain, where the
ufuncs make two) wins back its per-call cost.

Taken: ``op(a, b)`` and ``op2(op1(a, b), c)`` or ``op2(c, op1(a, b))`` with ``op`` in add,
sub, mul (``op2`` add or sub), operands tensors of the output's float type and shape (leading
axes of length 1 aside), or a sum over the leading axes of one (a bias gradient), computed by the
machine's column sum as before.  An operand that would broadcast along an axis (a bias row) is
left to the machine: numpy's iterator allocates a buffer for every such call, and a training
step allocates nothing after the first.  So is an operand laid out with other strides than the
output (a view into a joined buffer), for which the iterator allocates too, and one whose memory
range overlaps the output's without being the output itself: numpy copies it.  Scalars are left to the machine, so updates that take a learning rate
keep its exact arithmetic.  In ``op2(op1(a, b), c)`` the inner result is written into the
output first, so ``c`` may not share the output's memory.
"""
import numpy as np

from ..optree import OpNode

_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
_CHAINED = ("add", "sub")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
MAX_ELEMENTS = 131072


def run_ufuncs(out, tree, column_sum):
    """Evaluate ``tree`` into ndarray ``out`` as described in the module docstring; False
    (having written nothing) when the tree is not one of those shapes.  ``column_sum(node)``
    gives the array of an inner ``sum`` node over leading axes, or None."""
    ufunc = _UFUNCS.get(tree.op)
    dtype = out.dtype
    if ufunc is None or dtype not in _FLOATS or len(tree.args) != 2 or out.size > MAX_ELEMENTS:
        return False
    if _sums(tree) > 1:
        return False
    a, b = tree.args
    inner_a, inner_b = isinstance(a, OpNode), isinstance(b, OpNode)
    if (inner_a and a.op != "sum") or (inner_b and b.op != "sum"):
        return _chain(out, tree, ufunc, column_sum)
    x, y = _operand(a, out, column_sum), _operand(b, out, column_sum)
    if x is None or y is None:
        return False
    ufunc(x, y, out=out)
    return True


def _chain(out, tree, ufunc, column_sum):
    """``op2(op1(a, b), c)`` or ``op2(c, op1(a, b))``: op1 into out, then op2 in place."""
    if tree.op not in _CHAINED:
        return False
    a, b = tree.args
    inner_first = isinstance(a, OpNode) and a.op != "sum"
    inner, other = (a, b) if inner_first else (b, a)
    if isinstance(other, OpNode) and other.op != "sum":
        return False
    inner_ufunc = _UFUNCS.get(inner.op)
    if inner_ufunc is None or inner.op == "mul" or len(inner.args) != 2 or any(
            isinstance(arg, OpNode) and arg.op != "sum" for arg in inner.args):
        return False
    c = _operand(other, out, column_sum)
    if c is None or np.may_share_memory(c, out):
        return False
    x, y = (_operand(arg, out, column_sum) for arg in inner.args)
    if x is None or y is None:
        return False
    inner_ufunc(x, y, out=out)
    if inner_first:
        ufunc(out, c, out=out)
    else:
        ufunc(c, out, out=out)
    return True


def _sums(node):
    """How many ``sum`` nodes the tree has (their results share one kept buffer)."""
    if node.op == "sum":
        return 1
    return sum(_sums(arg) for arg in node.args if isinstance(arg, OpNode))


def _operand(arg, out, column_sum):
    """The ndarray of a tensor operand (or of an inner leading-axes sum) when it has the
    output's dtype and shape (leading axes of length 1 aside) and numpy will not copy it, else
    None."""
    if isinstance(arg, OpNode):
        ary = column_sum(arg)
    else:
        ary = getattr(arg, "_ary", None)
    if ary is None or ary.dtype != out.dtype:
        return None
    if ary.shape != out.shape:
        if ary.size != out.size or ary.ndim > out.ndim or any(
                s != o for s, o in zip(ary.shape[::-1], out.shape[::-1])):
            return None
    if _layout(ary) != _layout(out):
        return None  # numpy's iterator would allocate a buffer to walk the two layouts
    if np.may_share_memory(ary, out) and (
            ary.__array_interface__["data"][0] != out.__array_interface__["data"][0]):
        return None  # numpy would copy the operand first (its own overlap rule)
    return ary


def _layout(a):
    """The strides of a's axes longer than 1: two arrays of one shape (leading axes of length
    1 aside) with equal layouts are walked together without a buffer."""
    return tuple(st for n, st in zip(a.shape, a.strides) if n > 1)
