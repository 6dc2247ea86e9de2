"""Multi-head scaled dot-product attention on sequences (N, T, D): projections as GEMMs, the
attention itself as the backend's fused op (``Backend.attention``: no (T, T) array)."""
import math

import numpy as np

from ..backends.shared.attention_tables import AttentionDropout
from ..initializers import Constant, GlorotUniform
from .decode import DecodeState
from .dropout_masks import KeyedDropoutMixin
from .layer import FixedTensor, ParameterLayer, add_row_sums, flat_rows, is_count, steps_view

_TO_HEADS = (0, 2, 1, 3)  # (N, T, H, dh) <-> (N, H, T, dh); the permutation is its own inverse
#: the widest head (dk/H or dv/H) the fused attention kernels take
MAX_HEAD_WIDTH = 256


class MultiHeadAttention(KeyedDropoutMixin, ParameterLayer):
    """Multi-head attention: queries from the input x (N, Tq, d_model), keys and values from x
    itself (self-attention) or from a second input, the *context* (N, Tk, dc) (cross-attention).

        Q = x Wq + bq (N, Tq, dk)    K = c Wk + bk (N, Tk, dk)    V = c Wv + bv (N, Tk, dv)
        head h uses columns h*dk/H:(h+1)*dk/H of Q and K and h*dv/H:(h+1)*dv/H of V
        O_h = softmax(Q_h K_h^T / sqrt(dk/H) + mask) V_h,   y = concat_h(O_h) Wo + bo

    Parameters ``Wq`` (d_model, dk), ``Wk`` (dc, dk), ``Wv`` (dc, dv), ``Wo`` (dv, d_model) and
    ``bq, bk, bv, bo`` (none with ``bias=False``); by default dk = dv = dc = d_model, so each
    W is (d_model, d_model).

    Arguments:
        d_model (int): feature size of the input and the output.
        heads (int): number of heads H; must divide dk and dv.
        causal (bool): query i attends to key j only when j <= i + (Tk - Tq).
        dropout (float): drop probability on the attention weights while training.
        context_shape ((Tk, dc) or None): given, the layer is cross-attention and every
            fprop needs a context of shape (N, Tk, dc).
        dk, dv (int or None): total widths of the query/key and of the value projections.
        bias (bool): the projections have biases (default) or not.

    Second inputs in this graph-free API: ``fprop(x, inference=False, context=None,
    key_mask=None)``.  ``context`` is the cross-attention input; ``key_mask`` (N, Tk) hides
    key j of example n where it is 0 (padding).  Either may instead be set as the attributes
    ``layer.context`` / ``layer.key_mask`` (used when the argument is None, e.g. inside a
    container that calls ``fprop(x, inference)``).  ``bprop(error)`` returns the error for x
    and leaves the error for the context in ``layer.context_deltas`` (N, Tk, dc).

    The attention runs as the backend's fused op: only the log-sum-exp of each query row
    (N*H, Tq) is kept for bprop, never the (Tq, Tk) probabilities.  Dropout masks on the
    attention weights are per global example (:class:`KeyedDropoutMixin`), drawn inside the
    op from the Philox stream and drawn again by its backward pass.  Setting
    ``fixed_mask = True`` reuses the current dropout mask on later fprops (for gradient checks).

    Sequences of any length up to the configured ones: x (N, Tq', d_model) with 1 <= Tq' <=
    Tq and a context (N, Tk', dc) with 1 <= Tk' <= Tk (self-attention: Tk' = Tq').  Every
    buffer is made for Tq and Tk once; a batch runs on its views of the batch's lengths
    (:meth:`set_steps`, :meth:`_set_key_steps`), made once per length.
    """

    variable_steps = True
    stepped_buffers = ("outputs", "deltas", "of", "dof")

    def __init__(self, d_model, heads, causal=False, dropout=0.0, context_shape=None, dk=None,
                 dv=None, init=None, bias=True, name=None):
        super().__init__(name)
        if not isinstance(bias, bool):
            raise ValueError(f"MultiHeadAttention: bias must be true or false, got {bias!r}")
        self.bias = bias
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
        widest = max(self.dhk, self.dhv)
        limit = min(MAX_HEAD_WIDTH, getattr(self.be, "attention_max_head_width", MAX_HEAD_WIDTH))
        if widest > limit:
            raise ValueError(f"layer '{self.name}' ({type(self).__name__}): head width "
                             f"{widest} (dk/heads={self.dhk}, dv/heads={self.dhv}) is wider than "
                             f"{limit}, the widest the fused attention takes on this backend; "
                             f"use more heads")
        if self.causal and self.Tq > self.Tk:
            raise ValueError(f"layer '{self.name}' ({type(self).__name__}): causal attention "
                             f"with more queries (Tq={self.Tq}) than keys (Tk={self.Tk}) is "
                             f"undefined: query i sees keys j <= i + Tk - Tq, so the first "
                             f"{self.Tq - self.Tk} queries would see none")
        return in_shape

    def param_shapes(self):
        d, dc, dk, dv = self.d_model, self.dc, self.dk, self.dv
        pairs = ((d, dk), (dc, dk), (dc, dv), (dv, d))
        return [(nin, nout) for nin, nout in pairs] + \
            ([(nout,) for _, nout in pairs] if self.bias else [])

    def _allocate_projections(self):
        """Wq (d, dk), Wk (dc, dk), Wv (dc, dv), Wo (dv, d) and their biases (constant zeros,
        not parameters, with ``bias=False``)."""
        d, dc, dk, dv = self.d_model, self.dc, self.dk, self.dv
        for attr, nin, nout in (("q", d, dk), ("k", dc, dk), ("v", dc, dv), ("o", dv, d)):
            setattr(self, f"W{attr}", self.add_param(f"W{attr}", (nin, nout), self.init, nin,
                                                     nout))
            bias = self.add_param(f"b{attr}", (nout,), Constant(0.0), nout, nout) if self.bias \
                else FixedTensor(self.be, (nout,))
            setattr(self, f"b{attr}", bias)

    def _allocate_heads(self):
        """The merged attention output ``of`` and its gradient ``dof`` (N, Tq, dv), with their
        token-major (N, Tq, H, dhv) views ``oh`` / ``doh`` (the attention op's out and dout);
        ``context_deltas`` (N, Tk, dc) for cross-attention.  Q, K, V and their gradients
        (``qh``, ``kh``, ``vh``, ``dqh``, ``dkh``, ``dvh``) are (N, T, H, dh) views of the
        joined projections (``_Joined``), so no head permutes run."""
        be, N, Tq, Tk = self.be, self.be.bsz, self.Tq, self.Tk
        self.of, self.dof = be.zeros((N, Tq, self.dv)), be.zeros((N, Tq, self.dv))
        self.oh, self.doh = self._heads_view(self.of), self._heads_view(self.dof)
        if self.cross:
            self.context_deltas = be.zeros((N, Tk, self.dc))

    def allocate(self):
        super().allocate()
        self._allocate_projections()
        self._allocate_heads()
        self.lse = self.be.zeros((self.be.bsz * self.heads, self.Tq), dtype=_lse_dtype(self.be))
        self._drop = self._mask = self._last_drop = None
        if self.dropout:
            self.start_dropout_stream()
        be, N, Tq, Tk = self.be, self.be.bsz, self.Tq, self.Tk
        # Projections of one input with one head width share a GEMM: [Wq | Wk | Wv] on x for
        # self-attention (when dk/H == dv/H), [Wk | Wv] on the context for cross-attention.
        heads = [(self.Wq, self.bq, "q", self.dhk, False), (self.Wk, self.bk, "k", self.dhk,
                                                              self.cross),
                 (self.Wv, self.bv, "v", self.dhv, self.cross)]
        self._groups = []
        for W, b, name, dh, on_context in heads:
            group = next((g for g in self._groups if g.on_context == on_context
                          and g.dh == dh), None)
            if group is None:
                group = _Joined(on_context, dh)
                self._groups.append(group)
            group.members.append((W, b, name))
        self._ones = be.ones((1, N * max(Tq, Tk))) if self.bias else None
        for group in self._groups:
            group.allocate(be, self.dc if group.on_context else self.d_model, N,
                           Tk if group.on_context else Tq)
        self._lse_full, self._context_deltas_full = self.lse, self.context_deltas
        self._length_views = {}
        self.key_steps = None
        self._set_group_views(False, Tq)
        self._set_group_views(True, Tk)

    # ---- sequences of any length up to the configured ones ------------------------------------
    def _views(self, key, make):
        """The view ``make()`` for ``key`` (what, length), made once and kept."""
        view = self._length_views.get(key)
        if view is None:
            view = self._length_views[key] = make()
        return view

    def set_steps(self, steps):
        """Queries (and, for self-attention, keys) of ``steps`` steps: outputs, deltas, the
        merged heads and their views, lse and the projections on x become views of that
        length."""
        if steps == self.steps:
            return
        super().set_steps(steps)
        be, N = self.be, self.be.bsz
        self.oh = self._views(("oh", steps), lambda: be.keep(self._heads_view(self.of)))
        self.doh = self._views(("doh", steps), lambda: be.keep(self._heads_view(self.dof)))
        self.lse = self._views(("lse", steps), lambda: steps_view(
            be, self._lse_full, N * self.heads, self.Tq, steps))
        self._set_group_views(False, steps)

    def _set_key_steps(self, steps):
        """Keys and values of ``steps`` steps from the context (cross-attention)."""
        if steps == self.key_steps:
            return
        self._set_group_views(True, steps)
        self.context_deltas = self._views(("context_deltas", steps), lambda: steps_view(
            self.be, self._context_deltas_full, self.be.bsz, self.Tk, steps))

    def _set_group_views(self, on_context, steps):
        """The projections of x (or of the context) at ``steps`` steps: each group's views
        of that length and its members' qh, kh, vh (and gradients)."""
        for group in self._groups:
            if group.on_context != on_context:
                continue
            group.set_steps(self.be, steps)
            for (_, _, name), view, dview in zip(group.members, group.proj_views,
                                                 group.dproj_views):
                setattr(self, f"{name}h", view)
                setattr(self, f"d{name}h", dview)
        if on_context or not self.cross:
            self.key_steps = steps

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

    def _add_grads(self, inp2, e2, W, b):
        """W.grad += inp2^T e2, b.grad += the sum of e2's rows (inp2 (tokens, nin), e2
        (tokens, nout): every token); no bias gradient without biases."""
        self.be.compound_dot(inp2, e2, W.grad, beta=1.0, transA=True)
        if self.bias:
            add_row_sums(self.be, self._ones, e2, b.grad)

    def _add_joined_grads(self, inp2, group):
        """The members' W.grad += inp2^T (their columns of ``group.dproj2``), as one GEMM into
        ``group.dw`` (nin, width) and one add per member: a wider product runs faster than
        one per member, and on bf16 storage ``inp2`` is widened once instead of once per
        member; b.grad += the sums of each member's gradient columns."""
        self.be.compound_dot(inp2, group.dproj2, group.dw, transA=True)
        for (W, b, _), dw, dcols in zip(group.members, group.dw_columns, group.dproj_columns):
            W.grad[:] = W.grad + dw
            if self.bias:
                add_row_sums(self.be, self._ones, dcols, b.grad)

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
        shape = None if context is None else tuple(context.shape)
        if shape is None or len(shape) != 3 or shape[0] != expected[0] or \
                shape[2] != self.dc or not 1 <= shape[1] <= self.Tk:
            got = "none" if context is None else f"shape {shape}"
            raise ValueError(f"layer '{self.name}' (MultiHeadAttention) is cross-attention and "
                             f"needs a context of shape {expected}, got {got} (a context "
                             f"of 1 to {self.Tk} steps)")
        if self.causal and x.shape[1] > shape[1]:
            raise ValueError(f"layer '{self.name}' (MultiHeadAttention): causal attention "
                             f"with more queries ({x.shape[1]}) than keys ({shape[1]}) is "
                             f"undefined")
        self._set_key_steps(shape[1])
        return context

    def _key_mask(self, key_mask, batch):
        key_mask = self.mask_view(key_mask if key_mask is not None else self.key_mask,
                                  self.key_steps)
        if key_mask is not None and tuple(key_mask.shape) != (batch, self.key_steps):
            raise ValueError(f"layer '{self.name}' (MultiHeadAttention): key_mask must have "
                             f"shape {(batch, self.key_steps)} (N, Tk), got "
                             f"{tuple(key_mask.shape)}")
        return key_mask

    # ---- training path -------------------------------------------------------------------------
    def fprop(self, x, inference=False, context=None, key_mask=None):
        be = self.be
        c = self._context(x, context)
        mask = self._key_mask(key_mask, x.shape[0])
        self.x, self.c = x, c
        for group in self._groups:
            src = c if group.on_context else x
            group.join()
            be.compound_dot(flat_rows(src, group.w.shape[0]), group.w, group.proj2)
            group.proj2[:] = group.proj2 + group.b
        self._mask = mask
        self._drop = self._dropout(inference)
        self._attend()
        self._project(self.of, self.Wo, self.bo, self.outputs)
        return self.outputs

    def _attend(self):
        """oh = attention of qh, kh, vh (the fused op on the token-major views), lse kept
        for bprop."""
        self.be.attention(self.qh, self.kh, self.vh, self.oh, self.lse, self.scale, self.causal,
                          self._mask, self._drop, self.attention_blocks(), self.heads)

    def _attend_bprop(self):
        """dqh, dkh, dvh from doh, the probabilities recomputed from lse."""
        self.be.attention_bprop(self.qh, self.kh, self.vh, self.oh, self.lse, self.doh,
                                self.dqh, self.dkh, self.dvh, self.scale, self.causal,
                                self._mask, self._drop, self.attention_blocks(), self.heads)

    def attention_blocks(self):
        """The block layout the attention visits (None: every key up to the causal mask)."""
        return None

    def _dropout(self, inference):
        """This fprop's :class:`AttentionDropout` (None without dropout): a new step's stream,
        or the previous one while ``fixed_mask`` is set."""
        if not self.dropout or inference:
            return None
        if not (self.fixed_mask and self._last_drop is not None):
            self._last_drop = AttentionDropout(1.0 - self.dropout, self._dropout_key, self.step,
                                               self._dropout_stream, self.example_offset)
            self.step += 1
        return self._last_drop

    def _heads_view(self, tokens):
        """(N, T, H*dh) -> (N, T, H, dh)."""
        N, T, width = tokens.shape
        return tokens.reshape(N, T, self.heads, width // self.heads)

    def bprop(self, error):
        be = self.be
        self._add_grads(flat_rows(self.of, self.dv), flat_rows(error, self.d_model), self.Wo,
                        self.bo)
        self._back_input(error, self.Wo, self.dof, 0.0)
        self._attend_bprop()
        done = {"x": False, "c": False}
        for group in self._groups:
            src = self.c if group.on_context else self.x
            nin = group.w.shape[0]
            dproj = group.dproj2
            src2 = flat_rows(src, nin)
            if group.dw is None:
                for (W, b, _), dcols in zip(group.members, group.dproj_columns):
                    self._add_grads(src2, dcols, W, b)
            else:
                self._add_joined_grads(src2, group)
            target = "c" if group.on_context else "x"
            out = self.context_deltas if target == "c" else self.deltas
            if out is None:
                continue
            be.compound_dot(dproj, group.w, flat_rows(out, nin), beta=1.0 if done[target] else 0.0,
                            transB=True)
            done[target] = True
        return self.deltas if self.needs_deltas else None

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
        s.lse = be.zeros((batch * H, 1), dtype=_lse_dtype(be))
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
        be.attention(s.qh, s.kcache[:, :L], s.vcache[:, :L], s.oh, s.lse, self.scale, True,
                     None, None, self._decode_blocks(s, L), self.heads)
        self._merge_heads(s.oh, s.of)
        self._project(s.of, self.Wo, self.bo, s.out)
        s.pos = L
        return s.out

    def _decode_blocks(self, s, L):
        """The block layout of the new position pos = L - 1 against keys 0..pos, or None: the
        causal mask of a single last query sees every cached key."""
        return None


class _Joined:
    """Projections of one input (x, or the context) with one head width, run forward as one
    GEMM: ``members`` are (W, b, name: q, k or v); ``w`` (nin, width) and ``b`` (width,) hold
    their weights side by side, ``proj`` (N, T, width) the GEMM's output and ``dproj`` its
    gradient, whose column blocks ``dproj_columns`` (tokens, member width) give each member's
    bias gradient; the weight gradients of two or more members come from one GEMM into ``dw``
    (nin, width), whose column blocks ``dw_columns`` are added to each member's W.grad (None
    for a single member: its GEMM writes W.grad directly)."""

    def __init__(self, on_context, dh):
        self.on_context, self.dh, self.members = on_context, dh, []

    def allocate(self, be, nin, N, T):
        width = sum(W.value.shape[1] for W, *_ in self.members)
        self.w, self.b = be.zeros((nin, width)), be.zeros((width,))
        self.dw = be.zeros((nin, width)) if len(self.members) > 1 else None
        self.dw_columns = None if self.dw is None else \
            [be.keep(self.dw[:, col:col + w]) for _, _, col, w in self._columns()]
        self.full = be.zeros((N, T, width)), be.zeros((N, T, width))
        self.T, self.steps, self.at_steps = T, None, {}

    def set_steps(self, be, steps):
        """Use the views of ``steps`` steps (made once per length and kept): ``proj`` and
        ``dproj`` (N, steps, width), their 2-D views for the GEMMs, each member's (N, steps,
        H, dh) views and gradient columns."""
        if steps == self.steps:
            return
        views = self.at_steps.get(steps)
        if views is None:
            N, width = self.full[0].shape[0], self.full[0].shape[2]
            proj, dproj = (steps_view(be, t, N, self.T, steps) for t in self.full)
            proj2, dproj2 = be.keep(flat_rows(proj, width)), be.keep(flat_rows(dproj, width))
            views = self.at_steps[steps] = (
                proj, dproj, proj2, dproj2, self.views(be, proj), self.views(be, dproj),
                [be.keep(dproj2[:, col:col + w]) for _, _, col, w in self._columns()])
        (self.proj, self.dproj, self.proj2, self.dproj2, self.proj_views, self.dproj_views,
         self.dproj_columns) = views
        self.steps = steps

    def _columns(self):
        col = 0
        for W, b, _ in self.members:
            width = W.value.shape[1]
            yield W, b, col, width
            col += width

    def views(self, be, tokens):
        """Each member's (N, T, H, dh) view of ``proj`` or ``dproj`` (made once: kept)."""
        N, T, width = tokens.shape
        blocks = tokens.reshape(N, T, width // self.dh, self.dh)
        return [be.keep(blocks[:, :, col // self.dh:(col + w) // self.dh]) for _, _, col, w in
                self._columns()]

    def join(self):
        """w, b = the members' current weights and biases, side by side."""
        for W, b, col, width in self._columns():
            self.w[:, col:col + width] = W.value
            self.b[col:col + width] = b.value


def _lse_dtype(be):
    """The log-sum-exp rows are float32 at least (a 16-bit lse would spoil the recomputed
    probabilities), else the backend's type."""
    return np.float32 if np.dtype(be.dtype).itemsize < 4 else None


def _positive(what, value):
    if not is_count(value):
        raise ValueError(f"MultiHeadAttention: {what} must be a positive int, got {value!r}")
    return int(value)
