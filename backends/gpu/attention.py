"""The GPU backend's fused attention (``kernels/cuda/flash_attention.cu``): tiles of 32 queries x
32 keys, head widths up to 64, float32, float16 and bfloat16 storage (the 16-bit forward's
products on tensor cores, the rest float32 math on the CUDA cores), lse in float32.  The visit tables (``reference.attention.visit_tables``) are copied to the
device once per shape or layout.  Cases the kernels do not take (dropout, wider heads, block
layouts finer than 32, non-contiguous operands, a 16-bit lse) run the contract's default, the
numpy reference on host copies.  Compiled and emulated, not yet run on a GPU."""
import numpy as np

from ..reference.attention import visit_tables

TILE = 32
MAX_WIDTH = 64
_THREADS = 128


def _rows_contiguous(t):
    """(B, T, d) whose (T, d) slices are contiguous; the slice stride is free."""
    return t.ndim == 3 and t.strides[2] == 1 and t.strides[1] == t.shape[2]


class GPUAttentionMixin:
    """``Backend.attention`` / ``attention_bprop`` for the GPU backend.  Token-major
    (N, T, H, d) operands are permuted into head-major staging buffers (made once per shape)
    around the kernels, which take head-major slices."""

    def _fa_staging(self, tensors, heads):
        """Head-major stand-ins for the token-major tensors among ``tensors`` (the others as
        they are), and the (slot, token-major, stand-in) triples."""
        store = self.__dict__.setdefault("_fa_staged", {})
        staged, pairs = [], []
        for slot, t in enumerate(tensors):
            if len(t.shape) != 4:
                staged.append(t)
                continue
            N, T, H, d = t.shape
            key = (slot, tuple(t.shape), t.dtype)
            buf = store.get(key)
            if buf is None:
                buf = store[key] = self.zeros((N * H, T, d), dtype=t.dtype)
            staged.append(buf)
            pairs.append((slot, t, buf))
        return staged, pairs

    def _fa_to_heads(self, pairs, written):
        """The staged inputs (slots not in ``written``) copied into their stand-ins."""
        for slot, t, buf in pairs:
            if slot not in written:
                N, T, H, d = t.shape
                self.permute_axes(t, buf.reshape(N, H, T, d), (0, 2, 1, 3))

    def _fa_to_tokens(self, pairs, written):
        """The staged outputs (slots in ``written``) copied back from their stand-ins."""
        for slot, t, buf in pairs:
            if slot in written:
                N, T, H, d = t.shape
                self.permute_axes(buf.reshape(N, H, T, d), t, (0, 2, 1, 3))

    def _fa_tables(self, Tq, Tk, causal, blocks):
        """(table_heads, device row_ptr, cols, col_ptr, rows) at 32-token tiles, or None when
        the layout's blocks are finer than a tile."""
        if blocks is None:
            store, key = self.__dict__.setdefault("_fa_plain", {}), (Tq, Tk, bool(causal))
            layout = lambda: np.ones((1, -(-Tq // TILE), -(-Tk // TILE)))  # noqa: E731
        else:
            if blocks.bq != blocks.bk or blocks.bq % TILE:
                return None
            store, key = blocks.cache, ("gpu", id(self), Tq, Tk, bool(causal))
            grow = blocks.bq // TILE
            layout = lambda: np.kron(blocks.layout, np.ones((1, grow, grow)))[  # noqa: E731
                :, :-(-Tq // TILE), :-(-Tk // TILE)]
        found = store.get(key)
        if found is None:
            full = layout()
            tables = visit_tables(full, Tq, Tk, TILE, TILE, causal)
            found = store[key] = (full.shape[0],) + tuple(self.array(t, dtype=np.int32)
                                                          for t in tables)
        return found

    def _fa_usable(self, tensors, lse, causal, key_mask, dropout, blocks):
        storage = tensors[0].storage
        q, k, v = tensors[:3]
        return (dropout is None and max(q.shape[2], v.shape[2]) <= MAX_WIDTH
                and all(t.storage == storage for t in tensors)
                and (key_mask is None or (key_mask.storage == storage
                                          and key_mask.is_contiguous))
                and lse.storage == "f32" and lse.is_contiguous
                and all(_rows_contiguous(t) for t in tensors)
                and self._fa_tables(q.shape[1], k.shape[1], causal, blocks) is not None)

    def attention(self, q, k, v, out, lse, scale, causal=False, key_mask=None, dropout=None,
                  blocks=None, heads=1):
        self._check_attention(q, k, v, out, lse, key_mask, heads, blocks)
        (q, k, v, out), pairs = self._fa_staging((q, k, v, out), heads)
        if pairs:
            self._fa_to_heads(pairs, (3,))
            self.attention(q, k, v, out, lse, scale, causal, key_mask, dropout, blocks, heads)
            self._fa_to_tokens(pairs, (3,))
            return out
        if not self._fa_usable((q, k, v, out), lse, causal, key_mask, dropout, blocks):
            return super().attention(q, k, v, out, lse, scale, causal, key_mask, dropout, blocks,
                                     heads)
        B, Tq, dk = q.shape
        Tk, dv = k.shape[1], v.shape[2]
        th, row_ptr, cols, _, _ = self._fa_tables(Tq, Tk, causal, blocks)
        func = self.kernel("flash_attention", f"nl_fa_fprop_{q.storage}",
                           "PPPPPiiiiiqqqqfiPPPi")
        self.device.launch(func, (-(-Tq // TILE), B), (_THREADS, 1, 1),
                           [q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, heads, Tq, Tk, dk, dv,
                            *(t.strides[0] for t in (q, k, v, out)), np.float32(scale),
                            int(bool(causal)), 0 if key_mask is None else key_mask.ptr,
                            row_ptr.ptr, cols.ptr, th])
        return out

    def attention_bprop(self, q, k, v, out, lse, dout, dq, dk, dv, scale, causal=False,
                        key_mask=None, dropout=None, blocks=None, heads=1):
        self._check_attention(q, k, v, out, lse, key_mask, heads, blocks)
        tensors, pairs = self._fa_staging((q, k, v, out, dout, dq, dk, dv), heads)
        if pairs:
            self._fa_to_heads(pairs, (5, 6, 7))
            self.attention_bprop(*tensors[:4], lse, *tensors[4:], scale, causal, key_mask,
                                 dropout, blocks, heads)
            self._fa_to_tokens(pairs, (5, 6, 7))
            return dq
        q, k, v, out, dout, dq, dk, dv = tensors
        if not (self._fa_usable(tensors, lse, causal, key_mask, dropout, blocks)
                and all(t.is_contiguous for t in tensors)):
            return super().attention_bprop(q, k, v, out, lse, dout, dq, dk, dv, scale, causal,
                                           key_mask, dropout, blocks, heads)
        B, Tq, dkw = q.shape
        Tk, dvw = k.shape[1], v.shape[2]
        th, row_ptr, cols, col_ptr, rows = self._fa_tables(Tq, Tk, causal, blocks)
        mask = 0 if key_mask is None else key_mask.ptr
        common = [heads, Tq, Tk, dkw, dvw, np.float32(scale), int(bool(causal)), mask]
        kv = self.kernel("flash_attention", f"nl_fa_bprop_kv_{q.storage}",
                         "PPPPPPPPiiiiifiPPPi")
        self.device.launch(kv, (-(-Tk // TILE), B), (_THREADS, 1, 1),
                           [q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, dk.ptr, dv.ptr,
                            *common, col_ptr.ptr, rows.ptr, th])
        qf = self.kernel("flash_attention", f"nl_fa_bprop_q_{q.storage}", "PPPPPPPiiiiifiPPPi")
        self.device.launch(qf, (-(-Tq // TILE), B), (_THREADS, 1, 1),
                           [q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, dq.ptr, *common,
                            row_ptr.ptr, cols.ptr, th])
        return dq
