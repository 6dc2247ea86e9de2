"""Elementwise op-trees on the CPU in one pass over memory (the C virtual machine of
``kernels/cpu/optree.c``).

Several trees can run in the same pass (:meth:`OpTreeMachine.run_multi`: an optimizer step
that updates a velocity and the weights reads and writes each tensor once).

A tree is compiled once per structure (:meth:`OpNode.key`-like: ops, leaf slots, scalar slots)
into a program of ``(op, dst, a, b)`` instructions; each call then only gathers the leaves'
addresses and strides and the scalars' values, so a learning rate that changes every step reuses
the program.  The machine handles every tree whose tensors share the output's dtype (float32 or
float64; bfloat16 bits beside float32, loaded widened and stored rounded) and broadcast onto it
as a 2-D grid (any shape whose axes merge into at most two, e.g.
``(N, H, W, C)`` with a ``(C,)`` bias).  Reductions inside a tree are evaluated first (a sum
over the leading axes of a contiguous tensor, as a bias gradient is, by the machine's column
sum; any other by numpy) and enter the program as leaves.  Anything else (other dtypes, bf16
conversions, a root reduction, an output that overlaps an input other than exactly) is left
to the numpy evaluator.
"""
import functools

import numpy as np

from .build import address as _address
from ..reference.optree import evaluate_node
from ..optree import BINARY_OPS, REDUCTION_OPS, UNARY_OPS, OpNode, is_scalar
from ..shared.bfloat16 import is_bf16

_VM_OPS = tuple(op for op in UNARY_OPS + BINARY_OPS if op not in ("bf16_to_f32", "f32_to_bf16"))
_F32 = np.dtype(np.float32)
_FLOATS = (_F32, np.dtype(np.float64))


def _bits(dtype):
    """True for bfloat16 bits (cheap for the float dtypes: no metadata)."""
    return dtype.metadata is not None and is_bf16(dtype)


class _Unsupported(Exception):
    """The tree is one the machine does not run; numpy evaluates it."""


def _walk(node, leaves, index, consts, reductions, results=None):
    """The structural key of ``node``; fills ``leaves`` (arrays, each once), ``consts``.

    ``results`` maps the memory of earlier outputs (:func:`_memory`) to their output number:
    such a leaf is read as that output's new value, ``("o", number)`` in the key."""
    parts = [node.op]
    for arg in node.args:
        if isinstance(arg, OpNode):
            if arg.op in REDUCTION_OPS:
                parts.append(("t", len(leaves)))
                reductions.append((len(leaves), arg))
                leaves.append(None)
            else:
                parts.append(_walk(arg, leaves, index, consts, reductions, results))
        elif is_scalar(arg):
            parts.append(("c", len(consts)))
            consts.append(float(arg))
        else:
            parts.append(_leaf(arg, leaves, index, results))
    if node.op not in _VM_OPS:
        raise _Unsupported(node.op)
    return tuple(parts)


def _leaf(arg, leaves, index, results):
    ary = arg._ary if hasattr(arg, "_ary") else np.asarray(arg)
    if results:
        earlier = results.get(_memory(ary))
        if earlier is not None:
            return ("o", earlier)
    slot = index.get(id(arg))
    if slot is None:
        slot = index[id(arg)] = len(leaves)
        leaves.append(ary)
    return ("t", slot)


def _memory(ary):
    """What identifies the elements an array views: address, shape, strides, dtype."""
    return (_address(ary), ary.shape, ary.strides, ary.dtype.str)


def _column_sum(module, node, dtype, buffers):
    """``sum(t, axis=...)`` over the leading axes of a contiguous tensor ``t`` of ``dtype``
    (a bias gradient: (N, H, W, C) -> (1, 1, 1, C)) by the machine's column sum, or None.

    ``buffers(shape, rows, cols)`` gives the arrays the sum writes: the result (``shape``,
    ``dtype``; returned) and the C function's float64 work array for ``t`` viewed as
    (rows, cols) (see ``optree_column_sum`` in ``kernels/cpu/optree.h``)."""
    arg = node.args[0] if node.op == "sum" and len(node.args) == 1 else None
    ary = getattr(arg, "_ary", None)
    if ary is None or ary.dtype != dtype or not ary.flags.c_contiguous or ary.ndim < 2:
        return None
    axes = (node.axis,) if isinstance(node.axis, (int, np.integer)) else node.axis
    if axes is None:
        return None
    lead = sorted(int(a) % ary.ndim for a in axes)
    if lead != list(range(len(lead))) or len(lead) == ary.ndim or ary.size == 0:
        return None
    cols = int(np.prod(ary.shape[len(lead):]))
    out, work = buffers((1,) * len(lead) + ary.shape[len(lead):], ary.size // cols, cols)
    ffi = module.ffi
    module.lib.optree_column_sum(ffi.from_buffer("real[]", ary), ffi.from_buffer("real[]", out),
                                 ffi.from_buffer("double[]", work), ary.size // cols, cols)
    return out


def _program(keys, nleaf, nconst, opcodes):
    """Instructions (a flat list of int32, 4 per instruction) computing the trees ``keys`` in
    order, and the register holding each tree's value."""
    code, next_reg, results = [], [nleaf + nconst], []

    def emit(part):
        kind = part[0]
        if kind == "t":
            return part[1]
        if kind == "c":
            return nleaf + part[1]
        if kind == "o":
            return results[part[1]]
        args = [emit(p) for p in part[1:]]
        dst = next_reg[0]
        next_reg[0] += 1
        code.extend((opcodes[kind], dst, args[0], args[1] if len(args) > 1 else -1))
        return dst

    for key in keys:
        results.append(emit(key))
    return code, results


def _grid(out, arrays):
    """Merge the broadcast of ``arrays`` onto ``out`` into a (rows, cols) grid.

    Returns ``(rows, cols, strides)`` with ``strides`` a list of ``(row, col)`` element strides,
    the output's first, or raises :class:`_Unsupported`.
    """
    shape, nd = out.shape, out.ndim
    if out.flags.c_contiguous and all((a.size == 1 and a.ndim <= nd) or
                                      (a.shape == shape and a.flags.c_contiguous)
                                      for a in arrays):
        return 1, out.size, [(0, 1)] + [(0, 0) if a.size == 1 else (0, 1) for a in arrays]
    per_op = []
    for a in (out, *arrays):
        off = nd - a.ndim
        if off < 0:
            raise _Unsupported("operand has more axes than the output")
        st = [0] * nd
        for k, (dim, stride) in enumerate(zip(a.shape, a.strides)):
            if dim == 1:
                continue
            if dim != shape[off + k] or stride % a.itemsize:
                raise _Unsupported("operand does not broadcast onto the output")
            st[off + k] = stride // a.itemsize
        per_op.append(st)
    sizes, merged = [], [[] for _ in per_op]
    for k in range(nd):
        if shape[k] == 1:
            continue
        if sizes and all(m[-1] == st[k] * shape[k] for m, st in zip(merged, per_op)):
            sizes[-1] *= shape[k]
            for m, st in zip(merged, per_op):
                m[-1] = st[k]
        else:
            sizes.append(shape[k])
            for m, st in zip(merged, per_op):
                m.append(st[k])
    if len(sizes) > 2:
        raise _Unsupported("the broadcast does not merge into two axes")
    while len(sizes) < 2:
        sizes.insert(0, 1)
        for m in merged:
            m.insert(0, 0)
    return sizes[0], sizes[1], merged


class OpTreeMachine:
    """Runs op-trees with the C machine of ``kernels`` (a
    :class:`~neonlite.backends.cpu.build.KernelModules`)."""

    def __init__(self, kernels):
        self._kernels = kernels
        self._programs = {}
        self._sums = {}
        self._scratch = {}

    def run(self, out, tree, bf16=False):
        """Evaluate op-tree ``tree`` into ndarray ``out``; False when numpy must do it
        (``bf16``: see :meth:`run_multi`)."""
        if tree.op in REDUCTION_OPS:
            return False
        return self.run_multi([(out, tree)], reductions_ok=True, bf16=bf16)

    def run_multi(self, assignments, reductions_ok=False, bf16=False):
        """Evaluate ``[(out, tree), ...]`` (ndarrays, op-trees) in one pass over memory, as if
        ``out[...] = tree`` ran in order: a tree that reads an earlier output (the same memory,
        exactly) reads its new value.  The outputs must share one shape and may not overlap
        each other.  False, having written nothing, when the machine does not take them
        (inner reductions are taken only with ``reductions_ok``, for a single tree).

        ``bf16``: outputs and leaves may also be bfloat16 bits (arrays of dtype
        :data:`~neonlite.backends.shared.bfloat16.BFLOAT16`) beside float32 ones: the float32
        machine loads them widened and stores them rounded to nearest even
        (``optree_run_typed``); a tree with an inner reduction is then not taken."""
        outs = [out for out, _ in assignments]
        first = outs[0]
        out_bf16 = [bool(bf16 and _bits(o.dtype)) for o in outs]
        dtype = _F32 if any(out_bf16) else first.dtype
        if dtype not in _FLOATS or first.size == 0:
            return False
        if any(not (b or (o.dtype == dtype and not _bits(o.dtype))) or o.shape != first.shape
               or not o.flags.writeable or not isinstance(t, OpNode) or t.op in REDUCTION_OPS
               for o, b, (_, t) in zip(outs, out_bf16, assignments)):
            return False
        memories = [_memory(o) for o in outs]
        if len(set(memories)) != len(outs) or any(
                np.may_share_memory(a, b) for i, a in enumerate(outs) for b in outs[i + 1:]):
            return False
        leaves, consts, reductions, keys, index, results = [], [], [], [], {}, {}
        try:
            for number, (out, tree) in enumerate(assignments):
                keys.append(_walk(tree, leaves, index, consts, reductions, results))
                results[memories[number]] = number
        except _Unsupported:
            return False
        if reductions and not reductions_ok:
            return False
        leaf_bf16 = [bool(bf16 and a is not None and _bits(a.dtype)) for a in leaves]
        typed = any(out_bf16) or any(leaf_bf16)
        if typed and (dtype != _F32 or reductions):
            return False
        for a, b in zip(leaves, leaf_bf16):
            if a is not None and not b and (a.dtype != dtype or _bits(a.dtype)):
                return False
        module = self._kernels.module("optree", dtype)
        if module is None:
            return False
        for number, (slot, node) in enumerate(reductions):
            leaves[slot] = _column_sum(module, node, dtype,
                                       functools.partial(self._sum_buffers, module, dtype,
                                                         number))
            if leaves[slot] is None:
                leaves[slot] = np.asarray(evaluate_node(node, dtype))
            if leaves[slot].dtype != dtype:
                return False
        try:
            rows, cols, strides = _grid(first, leaves + outs[1:])
        except _Unsupported:
            return False
        addresses = [_address(a) for a in leaves]
        for out, memory in zip(outs, memories):
            for a, addr in zip(leaves, addresses):
                if np.may_share_memory(out, a) and _memory(a) != memory:
                    return False
        nleaf = len(leaves)
        code, out_regs, ninstr = self._program(module, tuple(keys), nleaf, len(consts))
        leaf_strides = [s for pair in strides[1:nleaf + 1] for s in pair]
        out_strides = [s for pair in strides[:1] + strides[nleaf + 1:] for s in pair]
        nregs = nleaf + len(consts) + ninstr
        if nregs > module.lib.NL_VM_MAX_REGS:
            return False
        scratch = module.ffi.from_buffer("real[]", self._vm_scratch(module, dtype, nregs))
        if typed:
            status = module.lib.optree_run_typed(
                code, ninstr, addresses, leaf_strides, leaf_bf16, nleaf, consts, len(consts),
                out_regs, [_address(o) for o in outs], out_strides, out_bf16, len(outs), rows,
                cols, scratch)
            return status == 0
        status = module.lib.optree_run_multi(code, ninstr, addresses, leaf_strides, nleaf,
                                             consts, len(consts), out_regs,
                                             [_address(o) for o in outs], out_strides,
                                             len(outs), rows, cols, scratch)
        return status == 0

    def leading_sum(self, node, dtype):
        """The array of ``sum`` node ``node`` over the leading axes of a contiguous tensor of
        ``dtype``, by the machine's column sum into its kept result (as the first inner
        reduction of a tree); None when the column sum does not take it."""
        module = self._kernels.module("optree", dtype)
        if module is None or node.op != "sum":
            return None
        return _column_sum(module, node, dtype,
                           functools.partial(self._sum_buffers, module, dtype, 0))

    def _vm_scratch(self, module, dtype, nregs):
        """The machine's register blocks for a program of ``nregs`` registers: a 1-D array of
        ``optree_scratch_size(nregs)`` elements of ``dtype`` (per OpenMP thread, 256 elements a
        register; see ``kernels/cpu/optree.h``).  One array per dtype, replaced by a bigger one
        only when a call needs more (a longer program, more threads), so a training loop
        allocates it while its largest tree first runs and never after."""
        size = int(module.lib.optree_scratch_size(nregs))
        key = np.dtype(dtype)
        scratch = self._scratch.get(key)
        if scratch is None or scratch.size < size:
            scratch = self._scratch[key] = np.empty(size, dtype=dtype)
        return scratch

    def _sum_buffers(self, module, dtype, number, shape, rows, cols):
        """(result, work) arrays of the tree's inner reduction ``number`` (0, 1, ... in the
        order :func:`_walk` meets them) when the column sum runs it (see :func:`_column_sum`).

        The result array is kept per (number, shape, dtype), so a training loop allocates it
        once.  That is safe because a reduction's value is a leaf of the one ``run_multi`` call
        that computed it and nothing else: it is read by that call's pass and never handed
        out, so the next call may overwrite it.  Two reductions of one tree never share a
        result (their numbers differ) even when their shapes agree.  The work array is only
        used during the C call and is shared (:meth:`KernelModules.block_sums_work`).  Like the
        program cache, this assumes one thread runs the machine at a time."""
        key = (number, shape, np.dtype(dtype))
        out = self._sums.get(key)
        if out is None:
            out = self._sums[key] = np.empty(shape, dtype=dtype)
        work = self._kernels.block_sums_work(module, "optree_column_sum", dtype, rows, cols)
        return out, work

    def _program(self, module, keys, nleaf, nconst):
        cache_key = (id(module), keys, nleaf, nconst)
        program = self._programs.get(cache_key)
        if program is None:
            opcodes = {op: getattr(module.lib, f"NL_OP_{op.upper()}") for op in _VM_OPS}
            code, results = _program(keys, nleaf, nconst, opcodes)
            program = (module.ffi.new("int32_t[]", code),
                       module.ffi.new("int32_t[]", results), len(code) // 4)
            self._programs[cache_key] = program
        return program
