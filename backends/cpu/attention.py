"""The CPU backend's fused attention: the C kernels of ``kernels/cpu/flash_attention.c``
(OpenMP over (slice, query block) forward and over slices backward) for float32/float64; the
rows' numpy reference (``backends/ops/softmax.py``) runs every other case.  The ops are
dispatched by the op table (operands, check, reference, cost); what is left here is the
backend's choice, :class:`CPUAttentionCalls`: tiles, visit tables, key groups, work arrays and
kept calls.

The kernels walk tables of the (query block, key block) tiles to visit: for plain attention
every key block up to the causal diagonal, for an :class:`AttentionBlocks` layout its nonzero
blocks.  The tables are made once per shape (kept on the backend, or on the layout object)."""
import numpy as np

from ..shared.attention_tables import AttentionBlocks, visit_tables
from .kept_calls import KeptCalls

#: query rows and keys per tile of plain (unblocked) attention; the kernels' FA_MAX_BLOCK
TILE = 64
#: the widest head (dk or dv) the kernels take; the kernels' FA_MAX_WIDTH
MAX_HEAD_WIDTH = 256
#: the backward pass splits each slice's key blocks into groups (at most MAX_GROUPS) until
#: there are about BACKWARD_ITEMS work items (slices x groups); a group past the first sums
#: into its own partial dq, (B, Tq, dk)
BACKWARD_ITEMS = 16
MAX_GROUPS = 8
#: the prepared kernel calls a backend keeps (``CPUAttentionCalls.run``)
MAX_PREPARED = 1024
#: the op-table rows :meth:`CPUAttentionCalls.run` runs
RUNS = ("attention", "attention_bprop")


def key_groups(col_ptr, table_heads, nkb, groups):
    """int32 (group_ptr (table_heads*groups + 1), group_cols): the key blocks of each table
    head dealt to ``groups`` groups of about equal work, by the number of query blocks that
    visit each (``col_ptr``), the most visited first, each to the least loaded group (ties:
    the lowest group); each group lists its blocks in increasing order.  A layout whose visits
    crowd into some columns (a strided layout) so spreads them over the groups, which a
    round-robin deal (block c to group c % groups) does not."""
    counts = np.diff(col_ptr).reshape(table_heads, nkb)
    ptr, cols = [0], []
    for t in range(table_heads):
        load, members = np.zeros(groups), [[] for _ in range(groups)]
        # +1: a block nobody visits still costs its zeroing
        for c in sorted(range(nkb), key=lambda c: (-counts[t, c], c)):
            g = int(np.argmin(load))
            members[g].append(c)
            load[g] += counts[t, c] + 1
        for m in members:
            cols += sorted(m)
            ptr.append(len(cols))
    return np.array(ptr, dtype=np.int32), np.array(cols, dtype=np.int32)


class CPUAttentionCalls:
    """The C calls of the op-table rows ``attention`` and ``attention_bprop`` (dispatched by
    the table, ``arguments="call"``): :meth:`run` is the CPU backend's ``OP_CALLS`` entry of
    both.  Holds the kernels (``KernelModules``), the visit tables of unblocked attention by
    (Tq, Tk, causal) and the prepared kernel calls (``kept``), one per backend."""

    def __init__(self, kernels):
        self.kernels = kernels
        self._attention_plain = {}
        self.kept = KeptCalls(MAX_PREPARED)

    def forget(self):
        """Drop the visit tables and the prepared calls (the next call makes them again)."""
        self._attention_plain.clear()
        self.kept.clear()

    def run(self, op, operands, scalars):
        """Run row ``op`` on CPU tensors ``operands`` (q, k, v, out, lse[, dout, dq, dk, dv],
        key_mask, dropout, blocks) and ``scalars`` (scale, causal, heads), after the row's
        check; False when the kernels do not take the case (then the backend runs the row's
        reference).

        Without a key mask, on kept tensors (a layer's buffers and the views it made once,
        not a decoder's per-step windows), the call is kept (:attr:`kept`) by the arrays'
        identities, the scalars, the layout and the OpenMP thread count (which sizes the work
        arrays), with weak references to the arrays (the backend's work arrays and tables are
        held by their cffi buffers), so a later call with the same living operands (every
        step) skips the check, strides and casts; a key mask, which a caller may change
        between calls, makes it anew each time.  At most ``MAX_PREPARED`` calls are kept."""
        tensors, (key_mask, dropout, blocks) = operands[:-3], operands[-3:]
        arrays = tuple([t._ary for t in tensors])
        key = None
        if key_mask is None and all(t.kept for t in tensors):
            key = (op.name, id(blocks)) + tuple(scalars) + tuple(map(id, arrays))
            found = self.kept.find(key, arrays)
            if found is not None and found[0].fa_threads() == found[1]:
                function, head, tail = found[2]
                function(*head, *_dropout_args(dropout), *tail)
                return True
        prepared = self._prepared_call(op, arrays, key_mask, blocks, operands, scalars)
        if prepared is None:
            return False
        lib, call = prepared
        if key is not None:
            self.kept.keep(key, arrays, (lib, lib.fa_threads(), call, blocks))
        function, head, tail = call
        function(*head, *_dropout_args(dropout), *tail)
        return True

    def _attention_tables(self, Tq, Tk, causal, blocks):
        """(bq, bk, table_heads, tables) for the kernels."""
        if blocks is not None:
            key = ("cpu", Tq, Tk, bool(causal))
            found = blocks.cache.get(key)
            if found is None:
                found = blocks.cache[key] = (
                    blocks.bq, blocks.bk, blocks.layout.shape[0],
                    visit_tables(blocks.layout, Tq, Tk, blocks.bq, blocks.bk, causal))
            return found
        store = self._attention_plain
        key = (Tq, Tk, bool(causal))
        found = store.get(key)
        if found is None:
            nqb, nkb = -(-Tq // TILE), -(-Tk // TILE)
            found = store[key] = (TILE, TILE, 1, visit_tables(np.ones((1, nqb, nkb)), Tq, Tk,
                                                              TILE, TILE, causal))
        return found

    def _key_groups(self, col_ptr, table_heads, nkb, groups, blocks, shape):
        """:func:`key_groups` of a table, made once (kept beside the tables)."""
        store = blocks.cache if blocks is not None else \
            self._attention_plain
        key = ("cpu groups", groups) + shape
        found = store.get(key)
        if found is None:
            found = store[key] = key_groups(col_ptr, table_heads, nkb, groups)
        return found

    def _attention_module(self, blocks, *arrays):
        dtype = arrays[0].dtype
        if dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
            return None
        if blocks is not None and max(blocks.bq, blocks.bk) > TILE:
            return None
        widths = (arrays[0].shape[-1], arrays[2].shape[-1])
        if max(widths) > MAX_HEAD_WIDTH:
            return None
        return self.kernels.module("flash_attention", dtype)

    def _attention_work(self, module, q, dk, dv):
        """The kernels' per-thread tiles (``fa_work_size`` reals per thread), kept in the
        kernels' workspaces: made once per (dtype, size)."""
        lib = module.lib
        size = int(lib.fa_threads()) * int(lib.fa_work_size(dk, dv))
        return module.ffi.from_buffer("real[]", self._attention_buffer("fa_work", q.dtype,
                                                                      size))

    def _attention_buffer(self, name, dtype, size):
        """A 1-D work array of ``size`` elements: the first ones of the longest one of
        ``name`` kept in the kernels' workspaces (so a batch of shorter sequences after a
        longer one allocates none)."""
        key = (name, np.dtype(dtype))
        work = self.kernels.workspaces.get(key)
        if work is None or work.size < size:
            work = self.kernels.workspaces[key] = np.empty(size, dtype=dtype)
        return work[:size]

    def _attention_pack(self, module, q, strides, packs, blocks, B, Tq, Tk, dk, dv):
        """The kernels' copy of the operands they read once per tile (forward: k and v, read
        by each query block; backward: q and dout, read by each key block) when those have
        strided rows (token-major views) and more than one block reads them, kept in the
        kernels' workspaces; NULL where the kernels read them in place.  ``packs``: the
        indices of those operands' row strides in ``strides`` and their widths; ``blocks``:
        how many blocks read them."""
        if blocks < 2 or all(strides[i] == w for i, w in packs):
            return module.ffi.NULL
        size = int(module.lib.fa_threads()) * int(module.lib.fa_pack_size(Tq, Tk, dk, dv))
        return module.ffi.from_buffer("real[]", self._attention_buffer("fa_pack", q.dtype,
                                                                      size))

    @staticmethod
    def _mask_array(key_mask, dtype):
        if key_mask is None:
            return None
        mask = key_mask._ary if hasattr(key_mask, "_ary") else np.asarray(key_mask)
        return mask if mask.dtype == dtype and mask.flags.c_contiguous else \
            np.ascontiguousarray(mask, dtype=dtype)

    def _prepared_call(self, op, arrays, key_mask, blocks, operands, scalars):
        """(kernel module's lib, (kernel function of row ``op``, its arguments before the
        dropout's, those after)) for these operands after the row's check, or None when the
        numpy reference must run."""
        op.check_operands(operands, scalars)
        scale, causal, heads = scalars
        mask = self._mask_array(key_mask, arrays[0].dtype)
        module = self._attention_module(blocks, *arrays)
        if module is None or not arrays[4].flags.c_contiguous:
            return None
        prepare = self._prepare_bprop if op.name == "attention_bprop" else self._prepare_fprop
        call = prepare(module, arrays, float(scale), bool(causal), mask, blocks, heads)
        return None if call is None else (module.lib, call)

    def _prepare_fprop(self, module, arrays, scale, causal, mask, blocks, heads):
        """``fa_fprop``'s call (see :meth:`run`), or None."""
        strides = _slice_strides(arrays[:4], heads)
        if strides is None:
            return None
        q, k, v = arrays[:3]
        B, Tq = arrays[4].shape
        Tk, dk, dv = k.shape[1], q.shape[-1], v.shape[-1]
        bq, bk, table_heads, (row_ptr, cols, _, _) = self._attention_tables(Tq, Tk, causal,
                                                                            blocks)
        ffi = module.ffi
        ptr = lambda a: ffi.cast("real *", a.ctypes.data)  # noqa: E731
        head = (*(ptr(a) for a in arrays), B, heads, Tq, Tk, dk, dv,
                ffi.from_buffer("int64_t[]", strides), scale, causal,
                ffi.NULL if mask is None else ptr(mask), bq, bk,
                ffi.from_buffer("int32_t[]", row_ptr), ffi.from_buffer("int32_t[]", cols),
                table_heads)
        tail = (self._attention_work(module, q, dk, dv),
                self._attention_pack(module, q, strides, ((5, dk), (8, dv)), -(-Tq // bq), B,
                                     Tq, Tk, dk, dv))
        return module.lib.fa_fprop, head, tail

    def _prepare_bprop(self, module, arrays, scale, causal, mask, blocks, heads):
        """``fa_bprop``'s call (see :meth:`run`), or None."""
        strides = _slice_strides(arrays[:4] + arrays[5:], heads)
        if strides is None:
            return None
        q, k, v = arrays[:3]
        B, Tq = arrays[4].shape
        Tk, dkw, dvw = k.shape[1], q.shape[-1], v.shape[-1]
        bq, bk, table_heads, (_, _, col_ptr, rows) = self._attention_tables(Tq, Tk, causal,
                                                                            blocks)
        groups = min(-(-Tk // bk), MAX_GROUPS, max(1, -(-BACKWARD_ITEMS // B)))
        group_ptr, group_cols = self._key_groups(col_ptr, table_heads, -(-Tk // bk), groups,
                                                 blocks, (Tq, Tk, causal))
        ffi = module.ffi
        ptr = lambda a: ffi.cast("real *", a.ctypes.data)  # noqa: E731
        parts = ffi.NULL if groups == 1 else ffi.from_buffer(
            "real[]", self._attention_buffer("fa_dq_parts", q.dtype, (groups - 1) * q.size))
        head = (*(ptr(a) for a in arrays), B, heads, Tq, Tk, dkw, dvw,
                ffi.from_buffer("int64_t[]", strides), scale, causal,
                ffi.NULL if mask is None else ptr(mask), bq, bk,
                ffi.from_buffer("int32_t[]", col_ptr), ffi.from_buffer("int32_t[]", rows),
                table_heads)
        tail = (groups, ffi.from_buffer("int32_t[]", group_ptr),
                ffi.from_buffer("int32_t[]", group_cols), parts,
                ffi.from_buffer("real[]", self._attention_buffer("fa_drows", q.dtype, B * Tq)),
                self._attention_work(module, q, dkw, dvw),
                self._attention_pack(module, q, strides, ((2, dkw), (14, dvw)), -(-Tk // bk),
                                     B, Tq, Tk, dkw, dvw))
        return module.lib.fa_bprop, head, tail


def _dropout_args(dropout):
    """The kernels' dropout arguments (keep, seed, step, stream, first); keep 1: none."""
    if dropout is None:
        return 1.0, 0, 0, 0, 0
    seed = int(dropout.key or 0) & 0xFFFFFFFFFFFFFFFF
    return (float(dropout.keep), seed, int(dropout.step) & 0xFFFFFFFF,
            int(dropout.stream) & 0xFFFFFFFF, int(dropout.first))


def _slice_strides(arrays, heads):
    """The kernels' (example, head, row) strides in elements of each array, int64 (3 per
    array), or None when one has rows the kernels cannot walk.  Head-major (B, T, d): the
    slice stride s0 gives example H*s0 and head s0 (s0 free: a window of a longer key/value
    cache); token-major (N, T, heads, d): example, row and head strides as they are.  Rows
    must be contiguous and the strides non-negative."""
    out = []
    for a in arrays:
        it = a.itemsize
        if a.strides[-1] != it or any(s < 0 or s % it for s in a.strides):
            return None
        s = [x // it for x in a.strides]
        if a.ndim == 3:
            out += [heads * s[0], s[0], s[1]]
        elif a.ndim == 4:
            out += [s[0], s[2], s[1]]
        else:
            return None
    return np.array(out, dtype=np.int64)


__all__ = ["AttentionBlocks", "CPUAttentionCalls", "visit_tables"]
