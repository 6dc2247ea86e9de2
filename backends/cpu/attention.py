"""The CPU backend's fused attention: the C kernels of ``kernels/cpu/flash_attention.c``
(OpenMP over (slice, query block) forward and over slices backward) for float32/float64, and
for bf16 tensors (q, k, v, out, dout, dq, dk, dv as bf16 bits, any of their strides, lse
float32) the kernels' bf16 entry points, which widen each tile's rows as they read them and
round the rows they write (``fa_fprop_bf16``, ``fa_bprop_bf16``: the bf16 boundary's whole
widening and narrowing passes are not made); the rows' numpy reference
(``backends/ops/softmax.py``) runs every other case.  The ops are
dispatched by the op table (operands, check, reference, cost); what is left here is the
backend's choice, :class:`CPUAttentionCalls`: tiles, visit tables, key groups, work arrays and
kept calls.

The kernels walk tables of the (query block, key block) tiles to visit: for plain attention
every key block up to the causal diagonal, for an :class:`AttentionBlocks` layout its nonzero
blocks.  The tables are made once per shape (kept on the backend, or on the layout object)."""
import numpy as np

from ..shared.attention_tables import AttentionBlocks, visit_tables
from ..shared.bfloat16 import bf16_to_f32
from .bf16_kernels import gemm_bf16_callee
from .kept_calls import KeptCalls
from .tensor import aligned_empty

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
#: the element type of bf16 calls' operands (bit patterns) and of their lse and work arrays
BF16, F32 = np.dtype(np.uint16), np.dtype(np.float32)
#: the index of lse among the rows' tensors (float32 in a bf16 call)
LSE = 4


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
        #: ``() -> (attention_compute module, bf16 GEMM module) or None``: the bf16 compute
        #: path's kernels where bf16 attention takes it (the backend sets its own)
        self.compute = lambda: None

    def forget(self):
        """Drop the visit tables and the prepared calls (the next call makes them again)."""
        self._attention_plain.clear()
        self.kept.clear()

    def run(self, op, operands, scalars):
        """Run row ``op`` on CPU tensors ``operands`` (q, k, v, out, lse[, dout, dq, dk, dv],
        key_mask, dropout, blocks) and ``scalars`` (scale, causal, heads), after the row's
        check; False when the kernels do not take the case (then the backend runs the row's
        reference, or, for bf16 tensors, the bf16 boundary widens them for the float32 call).

        Without a key mask, on kept tensors (a layer's buffers and the views it made once,
        not a decoder's per-step windows), the call is kept (:attr:`kept`) by the arrays'
        identities, the scalars, the layout and the OpenMP thread count (which sizes the work
        arrays), with weak references to the arrays (the backend's work arrays and tables are
        held by their cffi buffers), so a later call with the same living operands (every
        step) skips the check, strides and casts; a key mask, which a caller may change
        between calls, makes it anew each time.  At most ``MAX_PREPARED`` calls are kept."""
        tensors, (key_mask, dropout, blocks) = operands[:-3], operands[-3:]
        if dropout is None and blocks is None and getattr(tensors[0], "bf16", False):
            compute = self.compute()
            if compute is not None and self._run_compute(op, tensors, key_mask, operands,
                                                         scalars, compute):
                return True
        arrays = tuple([t._ary for t in tensors])
        key = None
        if key_mask is None and all(t.kept for t in tensors):
            key = (op.name, id(blocks)) + tuple(scalars) + tuple(map(id, arrays))
            found = self.kept.find(key, arrays)
            if found is not None and found[0].fa_threads() == found[1]:
                function, head, tail = found[2]
                function(*head, *_dropout_args(dropout), *tail)
                return True
        prepared = self._prepared_call(op, tensors, key_mask, blocks, operands, scalars)
        if prepared is None:
            return False
        lib, call = prepared
        if key is not None:
            self.kept.keep(key, arrays, (lib, lib.fa_threads(), call, blocks))
        function, head, tail = call
        function(*head, *_dropout_args(dropout), *tail)
        return True

    def _run_compute(self, op, tensors, key_mask, operands, scalars, compute):
        """Row ``op`` on bf16 tensors on the compute path (``kernels/cpu/bf16/
        attention_compute.c``: the products on the bf16 GEMM of ``compute``, ``(module, GEMM
        module)``), after the row's check; False where it does not take the case (an lse that
        is not contiguous float32, rows the kernels cannot walk): the flash kernels run it."""
        arrays = tuple([t._ary for t in tensors])
        lse = arrays[LSE]
        if lse.dtype != F32 or getattr(tensors[LSE], "bf16", False) or \
                not lse.flags.c_contiguous or \
                not all(getattr(t, "bf16", False) for i, t in enumerate(tensors) if i != LSE):
            return False
        bprop = op.name == "attention_bprop"
        scale, causal, heads = scalars
        strides = _slice_strides(arrays[:4] + (arrays[5:] if bprop else ()), heads)
        if strides is None:
            return False
        op.check_operands(operands, scalars)
        module, gemm = compute
        B, Tq = lse.shape
        Tk, dk, dv = arrays[1].shape[1], arrays[0].shape[-1], arrays[2].shape[-1]
        address, gemm_work = gemm_bf16_callee(gemm)
        nwork = int(module.lib.att_compute_threads())
        size = int(module.lib.att_compute_work_bytes(Tk, dk, dv, gemm_work, nwork))
        key = ("att_compute", F32)
        work = self.kernels.workspaces.get(key)
        if work is None or work.size * F32.itemsize < size:
            work = self.kernels.workspaces[key] = aligned_empty((-(-size // F32.itemsize),), F32)
        ffi = module.ffi
        ptr = _pointers(ffi, True)
        mask = self._mask_array(key_mask, F32)
        run = module.lib.att_bprop_compute if bprop else module.lib.att_fprop_compute
        status = run(*(ptr(a) for a in arrays), B, heads, Tq, Tk, dk, dv,
                     ffi.from_buffer("int64_t[]", strides), float(scale), bool(causal),
                     _held(ffi, mask), address, ffi.from_buffer(work), gemm_work, nwork)
        if status != 0:
            raise RuntimeError(f"{op.name}: the bf16 GEMM refused a product ({status})")
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

    def _attention_module(self, blocks, tensors):
        """(the kernels' module, whether the call is bf16) for these tensors, or None: float32
        or float64 tensors all of one type, or bf16 tensors but for a float32 lse."""
        arrays = [t._ary for t in tensors]
        dtype = arrays[0].dtype
        bf16 = getattr(tensors[0], "bf16", False)
        if bf16:
            if arrays[LSE].dtype != F32 or getattr(tensors[LSE], "bf16", False) or not all(
                    getattr(t, "bf16", False) for i, t in enumerate(tensors) if i != LSE):
                return None
            dtype = F32
        elif dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
            return None
        if blocks is not None and max(blocks.bq, blocks.bk) > TILE:
            return None
        widths = (arrays[0].shape[-1], arrays[2].shape[-1])
        if max(widths) > MAX_HEAD_WIDTH:
            return None
        module = self.kernels.module("flash_attention", dtype)
        return None if module is None else (module, bf16)

    def _attention_work(self, module, bf16, dk, dv):
        """The kernels' per-thread tiles (``fa_work_size`` reals per thread, bf16 calls
        ``fa_work_size_bf16``), kept in the kernels' workspaces: made once per (dtype, size)."""
        lib = module.lib
        per_thread = lib.fa_work_size_bf16(dk, dv) if bf16 else lib.fa_work_size(dk, dv)
        return module.ffi.from_buffer("real[]", self._attention_buffer(
            "fa_work", _real(module), int(lib.fa_threads()) * int(per_thread)))

    def _attention_buffer(self, name, dtype, size):
        """A 1-D work array of ``size`` elements: the first ones of the longest one of
        ``name`` kept in the kernels' workspaces (so a batch of shorter sequences after a
        longer one allocates none)."""
        key = (name, np.dtype(dtype))
        work = self.kernels.workspaces.get(key)
        if work is None or work.size < size:
            work = self.kernels.workspaces[key] = np.empty(size, dtype=dtype)
        return work[:size]

    def _attention_pack(self, module, bf16, strides, packs, blocks, Tq, Tk, dk, dv):
        """The kernels' copy of the operands they read once per tile (forward: k and v, read
        by each query block; backward: q and dout, read by each key block) when those have
        strided rows (token-major views) and more than one block reads them, kept in the
        kernels' workspaces; NULL where the kernels read them in place.  ``packs``: the
        indices of those operands' row strides in ``strides`` and their widths; ``blocks``:
        how many blocks read them.  A bf16 call always has one (``fa_pack_size_bf16``: the
        slice's rows widened, and the backward's dQ sums)."""
        lib = module.lib
        if bf16:
            per_thread = lib.fa_pack_size_bf16(Tq, Tk, dk, dv)
        elif blocks < 2 or all(strides[i] == w for i, w in packs):
            return module.ffi.NULL
        else:
            per_thread = lib.fa_pack_size(Tq, Tk, dk, dv)
        return module.ffi.from_buffer("real[]", self._attention_buffer(
            "fa_pack", _real(module), int(lib.fa_threads()) * int(per_thread)))

    @staticmethod
    def _mask_array(key_mask, dtype):
        """The key mask as a C-contiguous array of ``dtype`` (a bf16 tensor's bits widened)."""
        if key_mask is None:
            return None
        mask = key_mask._ary if hasattr(key_mask, "_ary") else np.asarray(key_mask)
        if getattr(key_mask, "bf16", False):
            mask = bf16_to_f32(mask)
        return mask if mask.dtype == dtype and mask.flags.c_contiguous else \
            np.ascontiguousarray(mask, dtype=dtype)

    def _prepared_call(self, op, tensors, key_mask, blocks, operands, scalars):
        """(kernel module's lib, (kernel function of row ``op``, its arguments before the
        dropout's, those after)) for these operands after the row's check, or None when the
        numpy reference (or, for bf16 tensors, the bf16 boundary) must run."""
        op.check_operands(operands, scalars)
        scale, causal, heads = scalars
        found = self._attention_module(blocks, tensors)
        arrays = tuple([t._ary for t in tensors])
        if found is None or not arrays[LSE].flags.c_contiguous:
            return None
        module, bf16 = found
        mask = self._mask_array(key_mask, _real(module))
        prepare = self._prepare_bprop if op.name == "attention_bprop" else self._prepare_fprop
        call = prepare(module, bf16, arrays, float(scale), bool(causal), mask, blocks, heads)
        return None if call is None else (module.lib, call)

    def _prepare_fprop(self, module, bf16, arrays, scale, causal, mask, blocks, heads):
        """``fa_fprop``'s call (``fa_fprop_bf16``'s with ``bf16``; see :meth:`run`), or
        None."""
        strides = _slice_strides(arrays[:4], heads)
        if strides is None:
            return None
        q, k, v = arrays[:3]
        B, Tq = arrays[LSE].shape
        Tk, dk, dv = k.shape[1], q.shape[-1], v.shape[-1]
        bq, bk, table_heads, (row_ptr, cols, _, _) = self._attention_tables(Tq, Tk, causal,
                                                                            blocks)
        ffi = module.ffi
        ptr = _pointers(ffi, bf16)
        head = (*(ptr(a) for a in arrays), B, heads, Tq, Tk, dk, dv,
                ffi.from_buffer("int64_t[]", strides), scale, causal,
                _held(ffi, mask), bq, bk,
                ffi.from_buffer("int32_t[]", row_ptr), ffi.from_buffer("int32_t[]", cols),
                table_heads)
        tail = (self._attention_work(module, bf16, dk, dv),
                self._attention_pack(module, bf16, strides, ((5, dk), (8, dv)), -(-Tq // bq),
                                     Tq, Tk, dk, dv))
        return (module.lib.fa_fprop_bf16 if bf16 else module.lib.fa_fprop), head, tail

    def _prepare_bprop(self, module, bf16, arrays, scale, causal, mask, blocks, heads):
        """``fa_bprop``'s call (``fa_bprop_bf16``'s with ``bf16``; see :meth:`run`), or
        None."""
        strides = _slice_strides(arrays[:4] + arrays[5:], heads)
        if strides is None:
            return None
        q, k, v = arrays[:3]
        B, Tq = arrays[LSE].shape
        Tk, dkw, dvw = k.shape[1], q.shape[-1], v.shape[-1]
        bq, bk, table_heads, (_, _, col_ptr, rows) = self._attention_tables(Tq, Tk, causal,
                                                                            blocks)
        groups = min(-(-Tk // bk), MAX_GROUPS, max(1, -(-BACKWARD_ITEMS // B)))
        group_ptr, group_cols = self._key_groups(col_ptr, table_heads, -(-Tk // bk), groups,
                                                 blocks, (Tq, Tk, causal))
        ffi, real = module.ffi, _real(module)
        ptr = _pointers(ffi, bf16)
        # every group's dQ of a bf16 call is a float partial (group 0's too)
        parts = ffi.NULL if groups == 1 else ffi.from_buffer(
            "real[]", self._attention_buffer("fa_dq_parts", real,
                                             (groups - 1 + bf16) * B * Tq * dkw))
        head = (*(ptr(a) for a in arrays), B, heads, Tq, Tk, dkw, dvw,
                ffi.from_buffer("int64_t[]", strides), scale, causal,
                _held(ffi, mask), bq, bk,
                ffi.from_buffer("int32_t[]", col_ptr), ffi.from_buffer("int32_t[]", rows),
                table_heads)
        tail = (groups, ffi.from_buffer("int32_t[]", group_ptr),
                ffi.from_buffer("int32_t[]", group_cols), parts,
                ffi.from_buffer("real[]", self._attention_buffer("fa_drows", real, B * Tq)),
                self._attention_work(module, bf16, dkw, dvw),
                self._attention_pack(module, bf16, strides, ((2, dkw), (14, dvw)),
                                     -(-Tk // bk), Tq, Tk, dkw, dvw))
        return (module.lib.fa_bprop_bf16 if bf16 else module.lib.fa_bprop), head, tail


def _held(ffi, mask):
    """The key mask's C pointer, holding the array (a widened or converted mask is the call's
    own; a raw pointer would outlive it), or NULL."""
    return ffi.NULL if mask is None else ffi.from_buffer("real[]", mask)


def _real(module):
    """The element type ``real`` of a kernel module (float32 or float64)."""
    return np.dtype(np.float32 if module.ffi.sizeof("real") == 4 else np.float64)


def _pointers(ffi, bf16):
    """The C pointer of an operand array: ``uint16_t *`` for a bf16 call's operands (its lse,
    float32, as ``real *``), else ``real *``."""
    def pointer(a):
        return ffi.cast("uint16_t *" if bf16 and a.dtype == BF16 else "real *", a.ctypes.data)
    return pointer


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
