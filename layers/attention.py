"""Multi-head scaled dot-product attention on sequences (N, T, D), as batched GEMMs and a fused
masked softmax (no loop over heads or positions)."""
import math

import numpy as np

from ..initializers import Constant, GlorotUniform
from .decode import DecodeState
from .layer import ParameterLayer, flat_rows

_TO_HEADS = (0, 2, 1, 3)  # (N, T, H, dh) <-> (N, H, T, dh); the permutation is its own inverse


class MultiHeadAttention(ParameterLayer):
    """Multi-head attention: queries from the input x (N, Tq, d_model), keys and values from x
    itself (self-attention) or from a second input, the *context* (N, Tk, dc) (cross-attention).

        Q = x Wq + bq (N, Tq, dk)    K = c Wk + bk (N, Tk, dk)    V = c Wv + bv (N, Tk, dv)
        head h uses columns h*dk/H:(h+1)*dk/H of Q and K and h*dv/H:(h+1)*dv/H of V
        O_h = softmax(Q_h K_h^T / sqrt(dk/H) + mask) V_h,   y = concat_h(O_h) Wo + bo

    Parameters ``Wq`` (d_model, dk), ``Wk`` (dc, dk), ``Wv`` (dc, dv), ``Wo`` (dv, d_model) and
    ``bq, bk, bv, bo``; by default dk = dv = dc = d_model, so each W is (d_model, d_model).

    Arguments:
        d_model (int): feature size of the input and the output.
        heads (int): number of heads H; must divide dk and dv.
        causal (bool): query i attends to key j only when j <= i + (Tk - Tq).
        dropout (float): drop probability on the attention weights while training.
        context_shape ((Tk, dc) or None): given, the layer is cross-attention and every
            fprop needs a context of shape (N, Tk, dc).
        dk, dv (int or None): total widths of the query/key and of the value projections.

    Second inputs in this graph-free API: ``fprop(x, inference=False, context=None,
    key_mask=None)``.  ``context`` is the cross-attention input; ``key_mask`` (N, Tk) hides
    key j of example n where it is 0 (padding).  Either may instead be set as the attributes
    ``layer.context`` / ``layer.key_mask`` (used when the argument is None, e.g. inside a
    container that calls ``fprop(x, inference)``).  ``bprop(error)`` returns the error for x
    and leaves the error for the context in ``layer.context_deltas`` (N, Tk, dc).

    Setting ``fixed_mask = True`` reuses the current dropout mask on later fprops (for
    gradient checks).
    """

    def __init__(self, d_model, heads, causal=False, dropout=0.0, context_shape=None, dk=None,
                 dv=None, init=None, name=None):
        super().__init__(name)
        self.d_model, self.heads = _positive("d_model", d_model), _positive("heads", heads)
        self.dk = _positive("dk", dk) if dk is not None else self.d_model
        self.dv = _positive("dv", dv) if dv is not None else self.d_model
        for what, width in (("dk", self.dk), ("dv", self.dv)):
            if width % self.heads:
                raise ValueError(f"MultiHeadAttention: {what}={width} is not a multiple of "
                                 f"heads={self.heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {dropout!r}")
        self.causal, self.dropout = bool(causal), float(dropout)
        self.cross = context_shape is not None
        if self.cross:
            context_shape = tuple(int(s) for s in context_shape)
            if len(context_shape) != 2 or min(context_shape) < 1:
                raise ValueError(f"MultiHeadAttention: context_shape must be (Tk, dc), got "
                                 f"{context_shape!r}")
        self.context_shape = context_shape
        self.init = init or GlorotUniform()
        self.context = None
        self.key_mask = None
        self.fixed_mask = False
        self.context_deltas = None

    def _configure(self, in_shape):
        if len(in_shape) != 2 or in_shape[1] != self.d_model:
            raise self.shape_error(f"a sequence (T, {self.d_model})")
        self.Tq = in_shape[0]
        self.Tk, self.dc = self.context_shape if self.cross else in_shape
        self.dhk, self.dhv = self.dk // self.heads, self.dv // self.heads
        self.scale = 1.0 / math.sqrt(self.dhk)
        return in_shape

    def allocate(self):
        super().allocate()
        d, dc, dk, dv = self.d_model, self.dc, self.dk, self.dv
        for attr, nin, nout in (("q", d, dk), ("k", dc, dk), ("v", dc, dv), ("o", dv, d)):
            setattr(self, f"W{attr}", self.add_param(f"W{attr}", (nin, nout), self.init, nin,
                                                     nout))
            setattr(self, f"b{attr}", self.add_param(f"b{attr}", (nout,), Constant(0.0), nout,
                                                     nout))
        be, N, H, Tq, Tk = self.be, self.be.bsz, self.heads, self.Tq, self.Tk
        # One GEMM projects the source of the keys and values: [Wq | Wk | Wv] on x
        # (self-attention), [Wk | Wv] on the context (cross-attention, the queries apart).
        # Its output, token-major (N, T, width), is read per head through strided views.
        self._joined = [(self.Wk, self.bk), (self.Wv, self.bv)]
        if not self.cross:
            self._joined.insert(0, (self.Wq, self.bq))
        width = sum(W.value.shape[1] for W, _ in self._joined)
        self.w_in, self.dw_in = be.zeros((dc, width)), be.zeros((dc, width))
        self.b_in, self.db_in = be.zeros((width,)), be.zeros((1, width))
        self.proj, self.dproj = be.zeros((N, Tk, width)), be.zeros((N, Tk, width))
        if self.cross:
            self.qf, self.dqf = be.zeros((N, Tq, dk)), be.zeros((N, Tq, dk))
            q, dq, first = self.qf, self.dqf, 0
        else:
            q, dq, first = self.proj[:, :, :dk], self.dproj[:, :, :dk], dk
        k, dkey = self.proj[:, :, first:first + dk], self.dproj[:, :, first:first + dk]
        v, dval = self.proj[:, :, first + dk:], self.dproj[:, :, first + dk:]
        self.of, self.dof = be.zeros((N, Tq, dv)), be.zeros((N, Tq, dv))
        self.probs, self.dprobs = be.zeros((N, H, Tq, Tk)), be.zeros((N, H, Tq, Tk))
        if self.dropout:
            self.mask, self.dropped = be.ones(self.probs.shape), be.zeros(self.probs.shape)
        if self.cross:
            self.context_deltas = be.zeros((N, Tk, dc))
        self._used = self.probs
        self._heads = [_HeadViews(h, self.dhk, self.dhv, q, k, v, dq, dkey, dval, self.of,
                                  self.dof, self.probs, self.dprobs,
                                  self.dropped if self.dropout else None)
                       for h in range(H)]

    # ---- helpers -------------------------------------------------------------------------------
    def _project(self, x, W, b, out):
        """out (N, T, width) = x W + b."""
        width = W.value.shape[1]
        self.be.compound_dot(flat_rows(x, W.value.shape[0]), W.value, flat_rows(out, width))
        out[:] = out + b.value

    def _split_heads(self, tokens, heads):
        """(N, T, H*dh) -> (N*H, T, dh)."""
        N, T, width = tokens.shape
        H = self.heads
        self.be.permute_axes(tokens.reshape(N, T, H, width // H),
                             heads.reshape(N, H, T, width // H), _TO_HEADS)

    def _merge_heads(self, heads, tokens):
        """(N*H, T, dh) -> (N, T, H*dh)."""
        N, T, width = tokens.shape
        H = self.heads
        self.be.permute_axes(heads.reshape(N, H, T, width // H),
                             tokens.reshape(N, T, H, width // H), _TO_HEADS)

    def _add_grads(self, inp, err, W, b):
        """W.grad += inp^T err, b.grad += sum of err's rows (both over every token)."""
        nin, nout = W.value.shape
        e2 = flat_rows(err, nout)
        self.be.compound_dot(flat_rows(inp, nin), e2, W.grad, beta=1.0, transA=True)
        b2 = b.grad.reshape(1, nout)
        b2[:] = b2 + self.be.sum(e2, axis=0)

    def _back_input(self, err, W, out, beta):
        """out (N, T, nin) = err W^T + beta * out."""
        nin, nout = W.value.shape
        self.be.compound_dot(flat_rows(err, nout), W.value, flat_rows(out, nin), beta=beta,
                             transB=True)

    def _context(self, x, context):
        context = context if context is not None else self.context
        if not self.cross:
            if context is not None:
                raise ValueError(f"layer '{self.name}' (MultiHeadAttention) is self-attention "
                                 f"and takes no context; give context_shape to make it "
                                 f"cross-attention")
            return x
        expected = (x.shape[0], self.Tk, self.dc)
        if context is None or tuple(context.shape) != expected:
            got = "none" if context is None else f"shape {tuple(context.shape)}"
            raise ValueError(f"layer '{self.name}' (MultiHeadAttention) is cross-attention and "
                             f"needs a context of shape {expected}, got {got}")
        return context

    def _key_mask(self, key_mask, batch):
        key_mask = key_mask if key_mask is not None else self.key_mask
        if key_mask is not None and tuple(key_mask.shape) != (batch, self.Tk):
            raise ValueError(f"layer '{self.name}' (MultiHeadAttention): key_mask must have "
                             f"shape {(batch, self.Tk)} (N, Tk), got {tuple(key_mask.shape)}")
        return key_mask

    # ---- training path -------------------------------------------------------------------------
    def _join_weights(self):
        """w_in, b_in = the joined projections' current weights and biases, side by side."""
        col = 0
        for W, b in self._joined:
            width = W.value.shape[1]
            self.w_in[:, col:col + width] = W.value
            self.b_in[col:col + width] = b.value
            col += width

    def _split_grads(self):
        """Add the gradients of the joined projections (dw_in, db_in) into their parameters."""
        col = 0
        for W, b in self._joined:
            width = W.value.shape[1]
            W.grad[:] = W.grad + self.dw_in[:, col:col + width]
            b2 = b.grad.reshape(1, width)
            b2[:] = b2 + self.db_in[:, col:col + width]
            col += width

    def _scores(self, batch):
        """The scores as (N*H, Tq, Tk) for the softmax (batch-major, then head)."""
        return batch.reshape(self.probs.shape[0] * self.heads, self.Tq, self.Tk)

    def fprop(self, x, inference=False, context=None, key_mask=None):
        be = self.be
        c = self._context(x, context)
        mask = self._key_mask(key_mask, x.shape[0])
        self.x, self.c = x, c
        self._join_weights()
        be.compound_dot(flat_rows(c, self.dc), self.w_in, flat_rows(self.proj, self.b_in.size))
        self.proj[:] = self.proj + self.b_in
        if self.cross:
            self._project(x, self.Wq, self.bq, self.qf)
        for h in self._heads:
            be.batched_dot(h.q, h.k, h.p, transB=True)
        scores = self._scores(self.probs)
        be.masked_softmax(scores, scores, self.scale, self.causal, mask)
        self._used = self.probs
        dropped = self.dropout and not inference
        if dropped:
            if not self.fixed_mask:
                be.dropout_mask(self.mask, 1.0 - self.dropout)
            self.dropped[:] = self.probs * self.mask
            self._used = self.dropped
        for h in self._heads:
            be.batched_dot(h.dropped if dropped else h.p, h.v, h.o)
        self._project(self.of, self.Wo, self.bo, self.outputs)
        return self.outputs

    def bprop(self, error):
        be = self.be
        dropped = self._used is not self.probs
        self._add_grads(self.of, error, self.Wo, self.bo)
        self._back_input(error, self.Wo, self.dof, 0.0)
        for h in self._heads:
            be.batched_dot(h.dropped if dropped else h.p, h.do, h.dv, transA=True)
            be.batched_dot(h.do, h.v, h.dp, transB=True)
        if dropped:
            self.dprobs[:] = self.dprobs * self.mask
        dscores = self._scores(self.dprobs)
        be.masked_softmax_bprop(self._scores(self.probs), dscores, dscores, self.scale)
        for h in self._heads:
            be.batched_dot(h.dp, h.k, h.dq)
            be.batched_dot(h.dp, h.q, h.dk, transA=True)
        dproj = flat_rows(self.dproj, self.b_in.size)
        be.compound_dot(flat_rows(self.c, self.dc), dproj, self.dw_in, transA=True)
        self.db_in[:] = be.sum(dproj, axis=0)
        self._split_grads()
        if self.cross:
            self._add_grads(self.x, self.dqf, self.Wq, self.bq)
            be.compound_dot(dproj, self.w_in, flat_rows(self.context_deltas, self.dc),
                            transB=True)
            if not self.needs_deltas:
                return None
            self._back_input(self.dqf, self.Wq, self.deltas, 0.0)
            return self.deltas
        if not self.needs_deltas:
            return None
        be.compound_dot(dproj, self.w_in, flat_rows(self.deltas, self.d_model), transB=True)
        return self.deltas

    # ---- incremental decoding (self-attention) -------------------------------------------------
    def init_decode(self, batch, max_len):
        """Key/value cache for ``batch`` sequences of up to ``max_len`` positions."""
        if self.cross or not self.causal:
            raise TypeError(f"layer '{self.name}': incremental decoding needs causal "
                            f"self-attention (a new position may not change earlier outputs)")
        be, H = self.be, self.heads
        s = DecodeState(be, batch, max_len)
        s.qf, s.kf, s.vf = (be.zeros((batch, 1, w)) for w in (self.dk, self.dk, self.dv))
        s.qh, s.kh = be.zeros((batch * H, 1, self.dhk)), be.zeros((batch * H, 1, self.dhk))
        s.vh, s.oh = be.zeros((batch * H, 1, self.dhv)), be.zeros((batch * H, 1, self.dhv))
        s.kcache = be.zeros((batch * H, max_len, self.dhk))
        s.vcache = be.zeros((batch * H, max_len, self.dhv))
        s.scores = be.zeros((batch * H, 1, max_len))
        s.of, s.out = be.zeros((batch, 1, self.dv)), be.zeros((batch, 1, self.d_model))
        return s

    def decode(self, x, s):
        """x (B, 1, d_model) at position ``s.pos``: appends its key and value to the cache and
        attends over positions 0..pos (the causal mask of a single last query); advances pos."""
        if s.pos >= s.max_len:
            raise ValueError(f"layer '{self.name}': the key/value cache holds {s.max_len} "
                             f"positions and is full")
        be, L = self.be, s.pos + 1
        self._project(x, self.Wq, self.bq, s.qf)
        self._project(x, self.Wk, self.bk, s.kf)
        self._project(x, self.Wv, self.bv, s.vf)
        self._split_heads(s.qf, s.qh)
        self._split_heads(s.kf, s.kh)
        self._split_heads(s.vf, s.vh)
        s.kcache[:, s.pos:L] = s.kh
        s.vcache[:, s.pos:L] = s.vh
        scores = s.scores[:, :, :L]
        be.batched_dot(s.qh, s.kcache[:, :L], scores, alpha=self.scale, transB=True)
        be.masked_softmax(scores, scores, 1.0, False, None)
        be.batched_dot(scores, s.vcache[:, :L], s.oh)
        self._merge_heads(s.oh, s.of)
        self._project(s.of, self.Wo, self.bo, s.out)
        s.pos = L
        return s.out


class _HeadViews:
    """Head h's strided views: q, k (N, T, dk/H), v (N, Tk, dv/H), o (N, Tq, dv/H) inside the
    token-major buffers, p (N, Tq, Tk) of the probabilities (``dropped``: after dropout), and
    the gradient views d* of the same places."""

    def __init__(self, h, dhk, dhv, q, k, v, dq, dk, dv, o, do, probs, dprobs, dropped):
        ks, vs = slice(h * dhk, (h + 1) * dhk), slice(h * dhv, (h + 1) * dhv)
        self.q, self.k, self.v, self.o = q[:, :, ks], k[:, :, ks], v[:, :, vs], o[:, :, vs]
        self.dq, self.dk, self.dv, self.do = dq[:, :, ks], dk[:, :, ks], dv[:, :, vs], do[:, :, vs]
        self.p, self.dp = probs[:, h], dprobs[:, h]
        self.dropped = None if dropped is None else dropped[:, h]


def _positive(what, value):
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"MultiHeadAttention: {what} must be a positive int, got {value!r}")
    return int(value)
