"""Lazy op-trees: ``out[:] = a * b + c`` builds a tree and evaluates it in one pass.

Every :class:`Tensor` and every :class:`OpNode` carries the arithmetic operators below; applying
one builds a new :class:`OpNode` instead of computing.  A tree is evaluated only when it is
assigned into a tensor (``out[:] = tree``), which calls ``backend.execute(out, tree)``.  The CPU
backend walks the tree with numpy; a GPU backend turns the tree's structure into one generated
kernel, memoized by :meth:`OpNode.key`.

Op names and arities are listed in :data:`UNARY_OPS`, :data:`BINARY_OPS` and
:data:`REDUCTION_OPS`; a backend implements exactly these.  Reductions keep their reduced axes
(numpy's ``keepdims=True``) so that ``x - be.max(x, axis=1)`` broadcasts like neon's.
"""
import numpy as np


UNARY_OPS = ("neg", "abs", "sqr", "sqrt", "rsqrt", "exp", "log", "tanh", "sig", "sign", "erf",
             "bf16_to_f32", "f32_to_bf16")
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum",
              "eq", "ne", "lt", "le", "gt", "ge")
REDUCTION_OPS = ("sum", "max", "min", "argmax", "argmin")


class OpTreeOps:
    """Operator overloads shared by tensors and op-tree nodes; each returns an :class:`OpNode`."""

    __array_priority__ = 100  # make ``ndarray * tensor`` defer to us

    def __add__(self, other):
        return OpNode("add", self, other)

    def __radd__(self, other):
        return OpNode("add", other, self)

    def __sub__(self, other):
        return OpNode("sub", self, other)

    def __rsub__(self, other):
        return OpNode("sub", other, self)

    def __mul__(self, other):
        return OpNode("mul", self, other)

    def __rmul__(self, other):
        return OpNode("mul", other, self)

    def __truediv__(self, other):
        return OpNode("div", self, other)

    def __rtruediv__(self, other):
        return OpNode("div", other, self)

    def __pow__(self, other):
        return OpNode("pow", self, other)

    def __rpow__(self, other):
        return OpNode("pow", other, self)

    def __neg__(self):
        return OpNode("neg", self)

    def __abs__(self):
        return OpNode("abs", self)

    def __eq__(self, other):
        return OpNode("eq", self, other)

    def __ne__(self, other):
        return OpNode("ne", self, other)

    def __lt__(self, other):
        return OpNode("lt", self, other)

    def __le__(self, other):
        return OpNode("le", self, other)

    def __gt__(self, other):
        return OpNode("gt", self, other)

    def __ge__(self, other):
        return OpNode("ge", self, other)

    __hash__ = object.__hash__


class OpNode(OpTreeOps):
    """One node of a lazy expression: ``op`` applied to ``args`` (nodes, tensors or scalars).

    ``axis`` is set for reductions only (None reduces over every axis).
    """

    __slots__ = ("op", "args", "axis")

    def __init__(self, op, *args, axis=None):
        if op not in UNARY_OPS + BINARY_OPS + REDUCTION_OPS:
            raise ValueError(f"unknown op-tree operation '{op}'")
        self.op = op
        self.args = args
        self.axis = axis

    def leaves(self):
        """The tensors under this node, left to right, each once (order is part of the key)."""
        found = []
        for arg in self.args:
            if isinstance(arg, OpNode):
                for leaf in arg.leaves():
                    if not any(leaf is f for f in found):
                        found.append(leaf)
            elif not _is_scalar(arg) and not any(arg is f for f in found):
                found.append(arg)
        return found

    def key(self, leaves=None):
        """A hashable description of the tree's structure: ops, axes, leaf slots and dtypes.

        Scalars enter the key as a slot, not by value, so a learning rate that changes every step
        does not produce a new key.
        """
        leaves = self.leaves() if leaves is None else leaves
        parts = []
        for arg in self.args:
            if isinstance(arg, OpNode):
                parts.append(arg.key(leaves))
            elif _is_scalar(arg):
                parts.append("s")
            else:
                index = next(i for i, leaf in enumerate(leaves) if leaf is arg)
                parts.append(("t", index, str(arg.dtype), _broadcast_signature(arg.shape)))
        return (self.op, self.axis, tuple(parts))

    def __repr__(self):
        inner = ", ".join(repr(a) if not hasattr(a, "shape") else f"T{tuple(a.shape)}"
                          for a in self.args)
        axis = "" if self.axis is None else f", axis={self.axis}"
        return f"{self.op}({inner}{axis})"


def _is_scalar(value):
    return isinstance(value, (int, float, bool)) or (
        hasattr(value, "shape") and not hasattr(value, "backend") and getattr(value, "ndim", 1) == 0)


def _broadcast_signature(shape):
    return tuple(1 if s == 1 else 0 for s in shape)


def is_scalar(value):
    """True for Python numbers and 0-d numpy values (which an op-tree takes as constants)."""
    return _is_scalar(value)


def broadcast_shape(node):
    """The broadcast shape of an op-tree (reductions keep their axes with length 1)."""
    if not isinstance(node, OpNode):
        return tuple(getattr(node, "shape", ()))
    shapes = [broadcast_shape(a) for a in node.args]
    shape = np.broadcast_shapes(*shapes)
    if node.op in ("sum", "max", "min", "argmax", "argmin"):
        if node.axis is None:
            return tuple(1 for _ in shape)
        axes = (node.axis,) if isinstance(node.axis, int) else node.axis
        axes = [a % len(shape) for a in axes]
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return shape


def assignment_error(tree, out_shape):
    """The ValueError saying why op-tree ``tree`` cannot be evaluated into an output of shape
    ``out_shape``: its operands do not broadcast together, or their result does not broadcast
    to the output (the GPU code generator's words); None when neither is the reason."""
    try:
        shape = broadcast_shape(tree)
    except ValueError:
        shapes = [tuple(a.shape) for a in tree.leaves()]
        return ValueError(f"op-tree {tree!r}: operand shapes {shapes} do not broadcast together")
    try:
        if np.broadcast_shapes(shape, tuple(out_shape)) == tuple(out_shape):
            return None
    except ValueError:
        pass
    return ValueError(f"op-tree {tree!r} of shape {shape} cannot be assigned to an output of "
                      f"shape {tuple(out_shape)}")
