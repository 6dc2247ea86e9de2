"""Block-sparse multi-head attention: scores only at the blocks of a layout."""
import numpy as np

from ..blocksparse import SUPPORTED_BLOCK_SIZES
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

    S and P are (N, nnz, bs, bs): block k is the k-th nonzero of the (H, Tq/bs, Tk/bs) layout
    in row-major order.  Queries of a row without stored blocks get zeros.

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

    No dropout and no key-padding mask.  ``bprop`` returns the error for x (and for the
    context, in ``context_deltas``).
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
        return out

    def allocate(self):
        super(MultiHeadAttention, self).allocate()
        self._allocate_projections()
        self._allocate_heads()
        be, N = self.be, self.be.bsz
        self.qf, self.kf = be.zeros((N, self.Tq, self.dk)), be.zeros((N, self.Tk, self.dk))
        self.vf = be.zeros((N, self.Tk, self.dv))
        sparse = (N, self.plan.nnz, self.bs, self.bs)
        self.probs, self.dprobs = be.zeros(sparse), be.zeros(sparse)

    def _heads4(self, t):
        """(N*H, T, dh) -> a (N, H, T, dh) view."""
        return t.reshape(t.shape[0] // self.heads, self.heads, t.shape[1], t.shape[2])

    def fprop(self, x, inference=False, context=None, key_mask=None):
        if key_mask is not None or self.key_mask is not None:
            raise self._error("a key-padding mask is not supported; the layout decides which "
                              "keys each query sees")
        be, h4 = self.be, self._heads4
        c = self._context(x, context)
        self.x, self.c = x, c
        self._project(x, self.Wq, self.bq, self.qf)
        self._project(c, self.Wk, self.bk, self.kf)
        self._project(c, self.Wv, self.bv, self.vf)
        self._split_heads(self.qf, self.qh)
        self._split_heads(self.kf, self.kh)
        self._split_heads(self.vf, self.vh)
        be.blocksparse_sdd(self.plan, h4(self.qh), h4(self.kh), self.probs, alpha=self.scale)
        be.blocksparse_softmax(self.plan, self.probs, self.probs, 1.0, self.causal)
        be.blocksparse_dsd(self.plan, self.probs, h4(self.vh), h4(self.oh))
        self._merge_heads(self.oh, self.of)
        self._project(self.of, self.Wo, self.bo, self.outputs)
        return self.outputs

    def bprop(self, error):
        be, h4 = self.be, self._heads4
        self._add_grads(self.of, error, self.Wo, self.bo)
        self._back_input(error, self.Wo, self.dof, 0.0)
        self._split_heads(self.dof, self.doh)
        be.blocksparse_dsd(self.plan, self.probs, h4(self.doh), h4(self.dvh), transposed=True)
        be.blocksparse_sdd(self.plan, h4(self.doh), h4(self.vh), self.dprobs)
        be.blocksparse_softmax_bprop(self.plan, self.probs, self.dprobs, self.dprobs,
                                     self.scale)
        be.blocksparse_dsd(self.plan, self.dprobs, h4(self.kh), h4(self.dqh))
        be.blocksparse_dsd(self.plan, self.dprobs, h4(self.qh), h4(self.dkh), transposed=True)
        dq, dk, dv = self.qf, self.kf, self.vf  # free since fprop: reused for the gradients
        self._merge_heads(self.dqh, dq)
        self._merge_heads(self.dkh, dk)
        self._merge_heads(self.dvh, dv)
        self._add_grads(self.x, dq, self.Wq, self.bq)
        self._add_grads(self.c, dk, self.Wk, self.bk)
        self._add_grads(self.c, dv, self.Wv, self.bv)
        if self.cross:
            self._back_input(dk, self.Wk, self.context_deltas, 0.0)
            self._back_input(dv, self.Wv, self.context_deltas, 1.0)
            if not self.needs_deltas:
                return None
            self._back_input(dq, self.Wq, self.deltas, 0.0)
            return self.deltas
        if not self.needs_deltas:
            return None
        self._back_input(dq, self.Wq, self.deltas, 0.0)
        self._back_input(dk, self.Wk, self.deltas, 1.0)
        self._back_input(dv, self.Wv, self.deltas, 1.0)
        return self.deltas

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        """The key/value cache of MultiHeadAttention plus a key mask (batch*H, max_len) that
        keeps, for the new position, only the keys the layout lets it see."""
        if max_len > self.Tk:
            raise TypeError(f"layer '{self.name}' (BlockSparseAttention): the layout covers "
                            f"{self.Tk} positions; decoding cannot go to {max_len}")
        state = super().init_decode(batch, max_len)
        state.kmask = self.be.zeros((batch * self.heads, max_len))
        layout = self.plan.layout
        keys = np.repeat(layout, self.bs, axis=2)  # (H, nq, Tk): keys seen by each query block
        state.visible = keys
        return state

    def _decode_key_mask(self, s, L):
        """Only the keys the layout shows position pos = L - 1 (and, causal, up to pos)."""
        row = s.visible[:, s.pos // self.bs, :L].astype(np.float64)  # (H, L)
        s.kmask.set(np.pad(np.tile(row, (s.batch, 1)), ((0, 0), (0, s.max_len - L))))
        return s.kmask[:, :L]
