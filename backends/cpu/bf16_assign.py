"""Assignments (``out[...] = value``: op-trees, copies, fills) on the CPU backend where
bfloat16 is involved: the part of the bf16 boundary (``bf16_boundary.py``) for the contract
methods that have no op-table row naming their operands (``execute``, ``fill``, ``zeros``,
``ones``, ``t[:] = other``, ``t[i] = value``).

* An elementwise op-tree runs in the op-tree machine, which loads bf16 leaves and stores a bf16
  output directly (``kernels/cpu/optree.c``, float32 arithmetic, round to nearest even on the
  store): one pass over memory, as for float32.
* Any other tree (an inner reduction, a broadcast the machine does not take) has its bf16
  leaves widened into the boundary's work tensors and is evaluated into a float32 work output
  (the float32 path: column sums, numpy), then narrowed.
* A bf16 tensor copied into a bf16 output is a copy of its bits (exact); a scalar fill stores
  the scalar's rounded bits; float values (a tensor, an array) are rounded.

``bf16_to_f32`` / ``f32_to_bf16`` nodes convert *plain* uint16 bit patterns (Adam's bf16
states); given a bf16 tensor, whose values are already numbers, they raise a TypeError rather
than read its values as integers.
"""
import numpy as np

from ..optree import OpNode, is_scalar
from ..shared.bfloat16 import is_bf16, scalar_bits
from .bf16_boundary import is_bf16_tensor

#: the op-tree nodes that take bit patterns
BIT_NODES = ("bf16_to_f32", "f32_to_bf16")


def is_bf16_array(ary):
    return ary.dtype.metadata is not None and is_bf16(ary.dtype)


def _check_bit_nodes(node):
    """TypeError where a bit-pattern node is given a bf16 tensor."""
    for arg in node.args:
        if isinstance(arg, OpNode):
            _check_bit_nodes(arg)
        elif node.op in BIT_NODES and is_bf16_tensor(arg):
            raise TypeError(f"{node.op} takes uint16 bit patterns (a plain uint16 tensor); "
                            f"got a bfloat16 tensor of shape {tuple(arg.shape)}, whose values "
                            f"are numbers already: use it as it is")


def _widened(node, boundary, slots):
    """``node`` with each bf16 tensor leaf replaced by its widened work tensor (``slots``:
    leaf id -> work tensor, the leaves numbered in the order met)."""
    args = []
    for arg in node.args:
        if isinstance(arg, OpNode):
            args.append(_widened(arg, boundary, slots))
        elif is_bf16_tensor(arg):
            work = slots.get(id(arg))
            if work is None:
                work = slots[id(arg)] = boundary.work_tensor(("execute", len(slots)),
                                                            arg.shape)
                boundary.widen(arg._ary, work._ary)
            args.append(work)
        else:
            args.append(arg)
    return OpNode(node.op, *args, axis=node.axis)


def _has_bf16_leaf(node):
    for arg in node.args:
        if isinstance(arg, OpNode):
            if _has_bf16_leaf(arg):
                return True
        elif is_bf16_tensor(arg):
            return True
    return False


def assign_bf16(be, out, value, machine):
    """``out[...] = value`` (``out`` an ndarray) where ``out`` or a leaf of ``value`` is
    bfloat16 (see the module docstring); False, having done nothing, where neither is (the
    float32 path runs).  ``machine``: the backend's op-tree machine."""
    out_bf16 = is_bf16_array(out)
    if isinstance(value, OpNode):
        if not (out_bf16 or _has_bf16_leaf(value)):
            return False
        _check_bit_nodes(value)
        if machine.run(out, value, bf16=True):
            return True
        boundary = be.bf16_boundary
        tree = _widened(value, boundary, {})
        if not out_bf16:
            be.evaluate_into(out, tree)
            return True
        work = boundary.work_tensor(("execute", "out"), out.shape)
        be.evaluate_into(work._ary, tree)
        boundary.narrow(work._ary, out, ("execute", "out"))
        return True
    if is_bf16_tensor(value):
        if out_bf16:
            np.copyto(out, value._ary, casting="unsafe")
            return True
        if out.dtype == np.float32 and out.flags.c_contiguous and out.shape == value.shape:
            be.bf16_boundary.widen(value._ary, out)
            return True
        work = be.bf16_boundary.work_tensor(("assign", "value"), value.shape)
        be.bf16_boundary.widen(value._ary, work._ary)
        np.copyto(out, work._ary, casting="unsafe")
        return True
    if not out_bf16:
        return False
    if is_scalar(value):
        out.fill(scalar_bits(value))
        return True
    source = np.asarray(value.__array__() if hasattr(value, "backend") else value)
    work = be.bf16_boundary.work_tensor(("assign", "out"), out.shape)
    np.copyto(work._ary, source, casting="unsafe")
    be.bf16_boundary.narrow(work._ary, out, ("assign", "out"))
    return True
