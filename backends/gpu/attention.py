"""The GPU backend's fused attention (``kernels/cuda/flash_attention.cu``), dispatched by the op
table (``backends/ops/softmax.py``: operands, check, cost); what is left here is the backend's
choice, :class:`GPUAttentionLaunches`: entry points, tables, staging.  float32, float16 and
bfloat16 storage (the 16-bit forward's products on tensor cores, the rest float32 math on the
CUDA cores), lse in float32.  Two kernel shapes (:data:`SHAPES`): tiles of 32 queries x 32 keys
for head widths up to 64, tiles of 16 x 16 for widths up to 128.  Dropout draws the
per-example Philox stream of :class:`~..shared.attention_tables.AttentionDropout` in the kernels
(regenerated in the backward pass, never stored).  A block layout of any block sizes: the
kernels visit the tiles holding a visible block (:func:`tile_layout`) and, where the blocks do
not fill whole tiles (e.g. 8-token blocks), mask inside a tile from the layout's bytes.  The
visit tables (``shared.attention_tables.visit_tables``) and such a layout are copied to the
device once per shape or layout; a key mask of another storage type or layout is cast into a
device buffer made once per shape.  Every call runs on the device: a case the kernels do not
take (heads wider than 128, operands of mixed storage, rows not contiguous, a 16-bit lse; for
the backward pass, non-contiguous operands) raises a ValueError naming the op, never a copy to
the host.  Compiled and emulated, not run on a GPU."""
import numpy as np

from ..shared.attention_tables import visit_tables

#: (tile, widest head) of the kernels' entry points ``nl_fa_*_t{tile}d{width}_*``, in the order
#: they are tried (a block layout prefers one whose tile divides its block sizes)
SHAPES = ((32, 64), (16, 128))
MAX_WIDTH = max(width for _, width in SHAPES)
#: the op-table rows :meth:`GPUAttentionLaunches.run` runs
RUNS = ("attention", "attention_bprop")
_THREADS = 128


def _rows_contiguous(t):
    """(B, T, d) whose (T, d) slices are contiguous; the slice stride is free."""
    return t.ndim == 3 and t.strides[2] == 1 and t.strides[1] == t.shape[2]


def kernel_shape(width, blocks):
    """(tile, widest head) of the entry points for heads up to ``width`` wide, preferring one
    whose tile divides the block sizes of ``blocks`` (an ``AttentionBlocks`` or None), or None
    when the heads are wider than every entry point takes."""
    fits = [(tile, most) for tile, most in SHAPES if width <= most]
    aligned = [(tile, most) for tile, most in fits
               if blocks is None or (blocks.bq % tile == 0 and blocks.bk % tile == 0)]
    return (aligned or fits or [None])[0]


def tile_layout(blocks, Tq, Tk, tile):
    """The (Hl, ceil(Tq/tile), ceil(Tk/tile)) 0/1 layout of the tiles that hold at least one
    visible block of ``blocks`` (its layout at token granularity, or-reduced over each tile)."""
    tokens = blocks.layout[:, np.arange(Tq) // blocks.bq]
    rows = np.logical_or.reduceat(tokens, np.arange(0, Tq, tile), axis=1)
    return np.logical_or.reduceat(rows[:, :, np.arange(Tk) // blocks.bk],
                                  np.arange(0, Tk, tile), axis=2)


def _dropout_args(dropout):
    """The kernels' trailing dropout arguments (keep, seed lo, seed hi, step, stream, first);
    keep 1: none."""
    if dropout is None:
        return [np.float32(1.0), 0, 0, 0, 0, 0]
    seed = int(dropout.key or 0) & 0xFFFFFFFFFFFFFFFF
    return [np.float32(dropout.keep), seed & 0xFFFFFFFF, seed >> 32,
            int(dropout.step) & 0xFFFFFFFF, int(dropout.stream) & 0xFFFFFFFF,
            int(dropout.first)]


def _layout_args(fine):
    """The kernels' trailing layout arguments (device bytes or 0, bq, bk)."""
    layout, bq, bk = fine
    return [0 if isinstance(layout, int) else layout.ptr, bq, bk]


class GPUAttentionLaunches:
    """The launches of the op-table rows ``attention`` and ``attention_bprop`` (dispatched
    by the table, ``arguments="call"``) on GPU backend ``be``: :meth:`run` is its
    ``OP_LAUNCHES`` entry of both.  Token-major (N, T, H, d) operands are permuted into
    head-major staging buffers (made once, for the longest T met; a shorter one uses their
    first elements) around the kernels, which take head-major slices.  Holds the visit tables
    of unblocked attention, the buffers they are written into and the key mask casts."""

    def __init__(self, be):
        self.be = be
        self._plain, self._written, self._masks = {}, {}, {}

    def run(self, op, operands, scalars):
        """Run row ``op`` on GPU tensors ``operands`` (q, k, v, out, lse[, dout, dq, dk, dv],
        key_mask, dropout, blocks) and ``scalars`` (scale, causal, heads), after the row's
        check; a case the kernels do not take is a ValueError naming the op."""
        op.check_operands(operands, scalars)
        *tensors, key_mask, dropout, blocks = operands
        scale, causal, heads = scalars
        if op.name == "attention_bprop":
            self._bprop(*tensors, scale, causal, key_mask, dropout, blocks, heads)
        else:
            self._fprop(*tensors, scale, causal, key_mask, dropout, blocks, heads)

    def _fa_staging(self, tensors, heads):
        """Head-major stand-ins for the token-major tensors among ``tensors`` (the others as
        they are), and the (slot, token-major, stand-in) triples."""
        staged, pairs = [], []
        for slot, t in enumerate(tensors):
            if len(t.shape) != 4:
                staged.append(t)
                continue
            N, T, H, d = t.shape
            buf = self.be.scratch_prefix(("fa_staged", slot, N, H, d), (N * H, T, d), t.dtype)
            staged.append(buf)
            pairs.append((slot, t, buf))
        return staged, pairs

    def _fa_to_heads(self, pairs, written):
        """The staged inputs (slots not in ``written``) copied into their stand-ins."""
        for slot, t, buf in pairs:
            if slot not in written:
                N, T, H, d = t.shape
                self.be.permute_axes(t, buf.reshape(N, H, T, d), (0, 2, 1, 3))

    def _fa_to_tokens(self, pairs, written):
        """The staged outputs (slots in ``written``) copied back from their stand-ins."""
        for slot, t, buf in pairs:
            if slot in written:
                N, T, H, d = t.shape
                self.be.permute_axes(buf.reshape(N, H, T, d), t, (0, 2, 1, 3))

    def _fa_tables(self, Tq, Tk, causal, blocks, tile):
        """(table_heads, device row_ptr, cols, col_ptr, rows, layout arguments) at
        ``tile``-token tiles; the layout arguments (device 0/1 bytes or 0, bq, bk) name a
        layout whose blocks do not fill whole tiles, for the kernels to mask inside a tile."""
        if blocks is None:
            store, key = self._plain, (Tq, Tk, bool(causal), tile)
        else:
            store, key = blocks.cache, ("gpu", id(self.be), Tq, Tk, bool(causal), tile)
        found = store.get(key)
        if found is None:
            fine = [0, 0, 0]
            if blocks is None:
                full = np.ones((1, -(-Tq // tile), -(-Tk // tile)))
            else:
                full = tile_layout(blocks, Tq, Tk, tile)
                if blocks.bq % tile or blocks.bk % tile:
                    fine = [self.be.array(blocks.layout, dtype=np.uint8), blocks.bq, blocks.bk]
            tables = visit_tables(full, Tq, Tk, tile, tile, causal)
            if blocks is not None:
                found = store[key] = ((full.shape[0],) + tuple(
                    self.be.array(t, dtype=np.int32) for t in tables) + (fine,))
            else:
                found = store[key] = (full.shape[0], [np.asarray(t, np.int32) for t in tables],
                                      fine)
        if blocks is not None:
            return found
        return self._fa_plain_tables(key, found, causal, tile)

    def _fa_plain_tables(self, key, found, causal, tile):
        """The dense layout's tables of ``key`` (Tq, Tk, causal, tile) on the device: in
        buffers kept per (causal, tile, Tq == Tk) (self- and cross-attention apart, so a
        model with both does not rewrite them at every call), made for the longest lengths
        met and written again when a call's lengths differ from the last one's (a batch of
        another length), so other lengths allocate nothing (the copy waits for the device
        first, so no queued kernel reads a table half written)."""
        heads, tables, fine = found
        written = self._written
        family = (bool(causal), tile, key[0] == key[1])
        last = written.get(family)
        if last is not None and last[0] == key:
            return last[1]
        bufs = [] if last is None else last[2]
        views = []
        for i, table in enumerate(tables):
            if i == len(bufs) or bufs[i].size < table.size:
                buf = self.be.empty((max(table.size, 1),), dtype=np.int32)
                bufs[i:i + 1] = [buf]
            view = bufs[i][:table.size] if table.size else bufs[i][:1]
            if table.size:
                view.set(table)
            views.append(view)
        result = (heads,) + tuple(views) + (fine,)
        written[family] = (key, result, bufs)
        return result

    def _fa_shape(self, op, tensors, lse, blocks):
        """(tile, width) of the kernels for this call; ValueError naming what they do not
        take."""
        storage = tensors[0].storage
        width = max(tensors[0].shape[2], tensors[2].shape[2])
        shape = kernel_shape(width, blocks)
        problem = None
        if shape is None:
            problem = f"head width {width} (dk or dv) is wider than {MAX_WIDTH}"
        elif any(t.storage != storage for t in tensors):
            problem = ("operands of mixed storage types "
                       f"{sorted({t.storage for t in tensors})}")
        elif lse.storage != "f32" or not lse.is_contiguous:
            problem = f"lse must be contiguous float32, got storage {lse.storage!r}"
        elif not all(_rows_contiguous(t) for t in tensors):
            name, t = next((n, t) for n, t in zip(("q", "k", "v", "out", "dout", "dq", "dk",
                                                   "dv"), tensors) if not _rows_contiguous(t))
            problem = (f"{name} (shape {tuple(t.shape)}, element strides {tuple(t.strides)}) "
                       f"has non-contiguous (T, d) slices")
        if problem is not None:
            raise ValueError(f"{op} (GPU backend): {problem}; the fused kernels take head "
                             f"widths up to {MAX_WIDTH}, operands of one storage type (f32, "
                             "f16, bf16) with contiguous rows, and a contiguous float32 lse")
        return shape

    def _fa_mask(self, key_mask, like):
        """The key mask as the kernels read it (contiguous, in the storage of ``like``):
        itself, or a device buffer (made once per shape) it is cast into on the device; 0 for
        none."""
        if key_mask is None:
            return 0
        if key_mask.storage == like.storage and key_mask.is_contiguous:
            return key_mask.ptr
        store = self._masks
        key = (tuple(key_mask.shape), like.storage)
        buf = store.get(key)
        if buf is None:
            buf = store[key] = self.be.zeros(key_mask.shape, dtype=like.dtype)
        self.be.assign(buf, key_mask)
        return buf.ptr

    def _fprop(self, q, k, v, out, lse, scale, causal, key_mask, dropout, blocks, heads):
        """The forward launch (the operands checked)."""
        (q, k, v, out), pairs = self._fa_staging((q, k, v, out), heads)
        if pairs:
            self._fa_to_heads(pairs, (3,))
            self._fprop(q, k, v, out, lse, scale, causal, key_mask, dropout, blocks, heads)
            self._fa_to_tokens(pairs, (3,))
            return
        tile, width = self._fa_shape("attention", (q, k, v, out), lse, blocks)
        B, Tq, dk = q.shape
        Tk, dv = k.shape[1], v.shape[2]
        th, row_ptr, cols, _, _, fine = self._fa_tables(Tq, Tk, causal, blocks, tile)
        func = self.be.kernel("flash_attention", f"nl_fa_fprop_t{tile}d{width}_{q.storage}",
                           "PPPPPiiiiiqqqqfiPPPifIIIIqPii")
        self.be.device.launch(func, (-(-Tq // tile), B), (_THREADS, 1, 1),
                           [q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, heads, Tq, Tk, dk, dv,
                            *(t.strides[0] for t in (q, k, v, out)), np.float32(scale),
                            int(bool(causal)), self._fa_mask(key_mask, q), row_ptr.ptr,
                            cols.ptr, th, *_dropout_args(dropout), *_layout_args(fine)])

    def _bprop(self, q, k, v, out, lse, dout, dq, dk, dv, scale, causal, key_mask, dropout,
               blocks, heads):
        """The backward launches (the operands checked)."""
        tensors, pairs = self._fa_staging((q, k, v, out, dout, dq, dk, dv), heads)
        if pairs:
            self._fa_to_heads(pairs, (5, 6, 7))
            self._bprop(*tensors[:4], lse, *tensors[4:], scale, causal, key_mask, dropout,
                        blocks, heads)
            self._fa_to_tokens(pairs, (5, 6, 7))
            return
        q, k, v, out, dout, dq, dk, dv = tensors
        tile, width = self._fa_shape("attention_bprop", tensors, lse, blocks)
        if not all(t.is_contiguous for t in tensors):
            name = next(n for n, t in zip(("q", "k", "v", "out", "dout", "dq", "dk", "dv"),
                                          tensors) if not t.is_contiguous)
            raise ValueError(f"attention_bprop (GPU backend): {name} is not contiguous; the "
                             "backward kernels take contiguous (B, T, d) operands (a window of "
                             "a longer key/value cache is for the forward pass only)")
        B, Tq, dkw = q.shape
        Tk, dvw = k.shape[1], v.shape[2]
        th, row_ptr, cols, col_ptr, rows, fine = self._fa_tables(Tq, Tk, causal, blocks, tile)
        common = [heads, Tq, Tk, dkw, dvw, np.float32(scale), int(bool(causal)),
                  self._fa_mask(key_mask, q)]
        tail = _dropout_args(dropout) + _layout_args(fine)
        name = f"t{tile}d{width}_{q.storage}"
        kv = self.be.kernel("flash_attention", f"nl_fa_bprop_kv_{name}",
                         "PPPPPPPPiiiiifiPPPifIIIIqPii")
        self.be.device.launch(kv, (-(-Tk // tile), B), (_THREADS, 1, 1),
                           [q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, dk.ptr, dv.ptr,
                            *common, col_ptr.ptr, rows.ptr, th, *tail])
        qf = self.be.kernel("flash_attention", f"nl_fa_bprop_q_{name}",
                         "PPPPPPPiiiiifiPPPifIIIIqPii")
        self.be.device.launch(qf, (-(-Tq // tile), B), (_THREADS, 1, 1),
                           [q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, dq.ptr, *common,
                            row_ptr.ptr, cols.ptr, th, *tail])
