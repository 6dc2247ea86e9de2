"""Numpy evaluation of op-trees (the CPU backend's reference path).

:func:`evaluate` walks an :class:`~neonlite.backends.optree.OpNode` tree bottom-up; the root
operation writes straight into the destination array when shapes and dtypes allow, so
``out[:] = a * b + c`` makes one temporary, not three.
"""
import math

import numpy as np

from ..optree import OpNode, broadcast_shape, is_scalar
from ..shared.bfloat16 import bf16_to_f32, f32_to_bf16

_SQRT_PI_INV = 1.0 / math.sqrt(math.pi)
_erf_exact = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    """Error function: exact (libm) in float64; otherwise Abramowitz-Stegun 7.1.26 evaluated in
    float64 (|error| < 1.5e-7) and rounded to the input's dtype."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _erf_exact(x).astype(np.float64)
    a = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                         + t * 1.061405429))))
    return np.copysign(1.0 - poly * np.exp(-a * a), x).astype(x.dtype, copy=False)


def _sig(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


_UNARY = {
    "neg": np.negative, "abs": np.abs, "sqr": np.square, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "sig": _sig, "sign": np.sign, "erf": erf, "bf16_to_f32": bf16_to_f32,
    "f32_to_bf16": f32_to_bf16,
}
_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def _value(arg, dtype):
    if isinstance(arg, OpNode):
        return evaluate_node(arg, dtype)
    if is_scalar(arg):
        return arg
    return arg.__array__()


def evaluate_node(node, dtype, out=None):
    """The value of op-tree node ``node`` as a numpy array (comparisons cast to ``dtype``); a
    root elementwise ufunc writes into ``out`` when given (the caller checks that it fits)."""
    op = node.op
    if op in _BINARY:
        a, b = (_value(x, dtype) for x in node.args)
        if op in _COMPARISONS:
            result = _BINARY[op](a, b).astype(dtype)
            return result
        if out is not None:
            return _BINARY[op](a, b, out=out)
        return _BINARY[op](a, b)
    x = _value(node.args[0], dtype)
    if op in _UNARY:
        if out is not None and isinstance(_UNARY[op], np.ufunc):
            return _UNARY[op](x, out=out)
        return _UNARY[op](x)
    axis = node.axis if node.axis is None or isinstance(node.axis, int) else tuple(node.axis)
    x = np.asarray(x)
    if op in _REDUCE:
        return _REDUCE[op](x, axis=axis, keepdims=True)
    func = np.argmax if op == "argmax" else np.argmin
    if axis is None:
        return func(x).reshape((1,) * x.ndim)
    return np.expand_dims(func(x, axis=axis), axis)


def evaluate(out, tree):
    """Evaluate op-tree, tensor, array or scalar ``tree`` into ndarray ``out`` (in place)."""
    if not isinstance(tree, OpNode):
        value = tree if is_scalar(tree) or isinstance(tree, np.ndarray) else tree.__array__()
        np.copyto(out, value, casting="unsafe")
        return out
    direct = (tree.op in _BINARY and tree.op not in _COMPARISONS) or (
        tree.op in _UNARY and isinstance(_UNARY[tree.op], np.ufunc))
    if direct and out.flags.writeable and _root_fits(tree, out):
        try:
            evaluate_node(tree, out.dtype, out=out)
            return out
        except (TypeError, ValueError):
            pass
    result = evaluate_node(tree, out.dtype)
    np.copyto(out, np.broadcast_to(result, out.shape), casting="unsafe")
    return out


def _root_fits(tree, out):
    """True when the root's result has exactly ``out``'s shape and dtype (so out= is safe)."""
    try:
        shape = broadcast_shape(tree)
    except ValueError:
        return False
    if tuple(shape) != tuple(out.shape):
        return False
    leaves = tree.leaves()
    return all(np.dtype(leaf.dtype) == out.dtype for leaf in leaves) and out.dtype.kind == "f"
