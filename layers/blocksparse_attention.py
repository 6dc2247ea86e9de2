"""Block-sparse multi-head attention: scores only at the blocks of a layout."""
import numpy as np

from ..backends.shared.attention_tables import AttentionBlocks
from ..backends.blocksparse_plan import SUPPORTED_BLOCK_SIZES
from ..blocksparse.layouts import from_spec
from .attention import MultiHeadAttention


class BlockSparseAttention(MultiHeadAttention):
    """Multi-head attention whose score matrix exists only at the blocks of ``layout``.

    Per head h, with Q, K, V the projections of :class:`MultiHeadAttention` split into heads
    (N, H, T, dh):

        S = scale * Q K^T          at the layout's blocks only (sampled dense x dense -> sparse)
        P = softmax(S)             over each query row's stored entries (causal: key position
                                   <= query position + Tk - Tq inside diagonal blocks)
        O = P V                    (sparse x dense), then heads merged and projected by Wo

    It runs as the backend's fused attention (``Backend.attention`` with an
    :class:`AttentionBlocks` layout): query block i of head h visits only the key blocks j
    with layout[h, i, j] = 1, and S and P exist only tile by tile, never as (N, nnz, bs, bs)
    arrays; bprop recomputes them from the log-sum-exp of each query row.  Queries of a row
    without stored blocks get zeros.

    Arguments:
        heads (int): number of heads H.
        layout: a 0/1 array (Tq/bs, Tk/bs) shared by every head or (H, Tq/bs, Tk/bs) per head,
            or (YAML) a mapping of generators of :mod:`neonlite.blocksparse.layouts`, e.g.
            ``{local: {window: 4}, strided: {stride: 4}}``, made once T is known.
        block_size (int): bs, one of 8, 16, 32, 64; T and Tk must be multiples of it.
        causal (bool): hide keys after the query; the layout loses its blocks above the
            causal diagonal.
        d_model (int or None): feature size; None takes it from the input at configure time.
        context_shape ((Tk, dc) or None): cross-attention, as in MultiHeadAttention.

    Sequences shorter than the configured T (and Tk) run on the layout cut to their blocks:
    its first ceil(T'/bs) query and ceil(Tk'/bs) key blocks (the last ones partial).
    A key-padding mask (``key_mask`` (N, Tk), or the padding mask of an Embedding with a
    ``pad_id`` before it) hides pad keys inside the visited blocks, as in MultiHeadAttention.
    No dropout.  ``bprop`` returns the error for x (and for the context, in
    ``context_deltas``).
    """

    def __init__(self, heads, layout, block_size=32, causal=True, d_model=None,
                 context_shape=None, init=None, name=None):
        if block_size not in SUPPORTED_BLOCK_SIZES:
            raise ValueError(f"BlockSparseAttention: block_size must be one of "
                             f"{SUPPORTED_BLOCK_SIZES} (the sizes the kernels are built for), "
                             f"got {block_size!r}")
        self._infer_width = d_model is None
        super().__init__(d_model if d_model is not None else heads, heads, causal=causal,
                         context_shape=context_shape, init=init, name=name)
        self.layout_spec, self.bs = layout, int(block_size)

    def _error(self, what):
        return ValueError(f"layer '{self.name}' (BlockSparseAttention): {what}")

    def _configure(self, in_shape):
        if self._infer_width and len(in_shape) == 2:
            if in_shape[1] % self.heads:
                raise self.shape_error(f"a feature size that is a multiple of heads="
                                       f"{self.heads}")
            self.d_model = self.dk = self.dv = in_shape[1]
        out = super()._configure(in_shape)
        bs = self.bs
        for what, t in (("query length T", self.Tq), ("key length Tk", self.Tk)):
            if t % bs:
                raise self._error(f"the {what}={t} is not a multiple of block_size={bs}")
        want = (self.heads, self.Tq // bs, self.Tk // bs)
        try:
            layout = from_spec(self.layout_spec, want, causal_mask=self.causal,
                               where="layout")
        except ValueError as err:
            raise self._error(str(err)) from None
        if layout.shape not in (want, want[1:]):
            raise self._error(f"layout has shape {layout.shape} blocks, expected "
                              f"(Tq/bs, Tk/bs) = {want[1:]} or (heads, Tq/bs, Tk/bs) = {want} "
                              f"for T={self.Tq}, Tk={self.Tk}, block_size={bs}")
        layout = np.ascontiguousarray(np.broadcast_to(layout, want))
        if not layout.any():
            raise self._error(f"the layout {layout.shape} has no blocks"
                              f"{' below the causal diagonal' if self.causal else ''} (all "
                              f"zeros); attention needs at least one stored block")
        self.plan = self.be.blocksparse_layer(layout, bs)
        self._blocks = AttentionBlocks(layout, bs, bs)
        self._cut_blocks = {(self.Tq, self.Tk): self._blocks}
        return out

    def attention_blocks(self):
        """The layout as the fused attention's tiles: query and key blocks of block_size,
        cut to the blocks of this batch's lengths (made once per pair of lengths)."""
        key = (self.steps, self.key_steps)
        found = self._cut_blocks.get(key)
        if found is None:
            rows, cols = -(-key[0] // self.bs), -(-key[1] // self.bs)
            found = self._cut_blocks[key] = AttentionBlocks(
                self._blocks.layout[:, :rows, :cols], self.bs, self.bs)
        return found


    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        """The key/value cache of MultiHeadAttention; each new position attends over the key
        blocks of its query block's layout row (``_decode_blocks``)."""
        if max_len > self.Tk:
            raise TypeError(f"layer '{self.name}' (BlockSparseAttention): the layout covers "
                            f"{self.Tk} positions; decoding cannot go to {max_len}")
        state = super().init_decode(batch, max_len)
        state.blocks = {}
        return state

    def _decode_blocks(self, s, L):
        """Position pos = L - 1 sees the key blocks of its query block's layout row (and,
        causal, keys up to pos)."""
        key = (s.pos // self.bs, -(-L // self.bs))
        found = s.blocks.get(key)
        if found is None:
            row = self.plan.layout[:, key[0]:key[0] + 1, :key[1]]
            found = s.blocks[key] = AttentionBlocks(row, 1, self.bs)
        return found
