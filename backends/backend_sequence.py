"""The sequence sections of the backend contract (see :mod:`.backend` for its conventions):
fused attention on head-major slices and the whole-sequence passes of recurrent cells, as
loops over their gate steps.  :class:`~.backend.Backend` inherits them (the ops the op table
dispatches, such as the gate steps and local response normalization, come from
``ops/dispatch.py``; ``ops/recurrent.py`` states the gate steps' conventions)."""
from abc import ABC, abstractmethod

from .operand_shapes import check_sequence, example_rows
from .ops import OPS
from .shared.recurrent_steps import step_of, time_steps
from .reference import attention as numpy_attention

#: the rows whose check the attention defaults run
ATTENTION, ATTENTION_BPROP = OPS["attention"], OPS["attention_bprop"]


class SequenceOps(ABC):
    """Attention and recurrent sequences of the backend contract."""

    #: the rows ``example_dropout_mask`` reads its mask as (checked)
    example_rows = staticmethod(example_rows)

    # ---- fused attention -------------------------------------------------------------------------
    def attention(self, q, k, v, out, lse, scale, causal=False, key_mask=None, dropout=None,
                  blocks=None, heads=1):
        """Fused attention on head-major slices, never holding a (Tq, Tk) array:

            out[b] = dropout(softmax(scale * q[b] k[b]^T + hidden)) v[b]
            lse[b, i] = log(sum_j exp(scale * q[b, i] . k[b, j]) over the visible keys j)

        q (B, Tq, dk), k (B, Tk, dk), v (B, Tk, dv), out (B, Tq, dv), lse (B, Tq); B = N *
        ``heads`` slices, slice b belongs to example b // heads.  Hidden keys: with ``causal``
        key j > i + (Tk - Tq) (the queries are the last Tq of the Tk positions, as when decoding
        against a key/value cache); where ``key_mask`` (N, Tk) is 0; outside the visited tiles
        of ``blocks`` (an
        :class:`~neonlite.backends.shared.attention_tables.AttentionBlocks` layout).
        A row with every key hidden gets out 0 and lse -inf.  ``dropout``
        (:class:`~neonlite.backends.shared.attention_tables.AttentionDropout` or None) drops
        probabilities after the softmax with the per-example Philox stream; it is regenerated
        by ``attention_bprop``, never stored.  k and v may be windows of longer buffers (e.g.
        ``cache[:, :L]``).  Each of q, k, v, out (and of dout, dq, dk, dv in
        ``attention_bprop``) may instead be token-major, (N, T, heads, d) (slice b = n*heads + h
        is [n, :, h]; e.g. the (N, T, H, dh) view of a projection's columns), so a layer needs
        no head permutes.  This default runs the numpy reference on host copies."""
        ATTENTION.check("attention", q, k, v, out, lse, key_mask=key_mask, heads=heads,
                        blocks=blocks)
        o, m = out.get(), lse.get()
        numpy_attention.attention(q.get(), k.get(), v.get(), o, m, scale, causal,
                                  None if key_mask is None else key_mask.get(), dropout, blocks,
                                  heads)
        out.set(o)
        lse.set(m)
        return out

    def attention_bprop(self, q, k, v, out, lse, dout, dq, dk, dv, scale, causal=False,
                        key_mask=None, dropout=None, blocks=None, heads=1):
        """dq (B, Tq, dk), dk (B, Tk, dk), dv (B, Tk, dv) (overwritten) of ``attention`` called
        with the same arguments, for the output gradient dout (B, Tq, dv); the probabilities
        are recomputed from ``lse`` tile by tile.  This default runs the numpy reference on
        host copies."""
        ATTENTION_BPROP.check("attention_bprop", q, k, v, out, lse, dout, dq, dk, dv,
                              key_mask=key_mask, heads=heads, blocks=blocks)
        grads = [dq.get(), dk.get(), dv.get()]
        numpy_attention.attention_bprop(q.get(), k.get(), v.get(), out.get(), lse.get(),
                                        dout.get(), *grads, scale, causal,
                                        None if key_mask is None else key_mask.get(), dropout,
                                        blocks, heads)
        for t, g in zip((dq, dk, dv), grads):
            t.set(g)
        return dq

    # ---- whole recurrent sequences -------------------------------------------------------------
    # The T steps of a cell in one call, so a backend can run the loop over time in its own
    # code.  gates (T, N, G) (G = H, 3H, 4H for the rnn, GRU, LSTM; the rnn's ``xg``): in the
    # input projections with bias, out (GRU, LSTM) the activated gates; U (H, G); hg (N, G)
    # work; h (and c) (T+1, N, H): entry 0 (entry T with ``reverse``) the initial state, entry
    # t+1 (t) the state after step t; mask (T, N) or None.  The bprops walk the steps
    # backwards, each the cell's bprop step, then (but after the last) dh += d_t @ U^T; dy
    # (T, N, H) or None; dh (and dc) (N, H) in the errors reaching the final state.  These
    # defaults run the steps above.
    def rnn_fprop_sequence(self, xg, hg, U, h, mask=None, reverse=False, activation="tanh"):
        """Steps t = 0..T-1 (T-1..0 with ``reverse``): hg (N, H) = h_prev @ U, then
        ``rnn_fprop_step``."""
        check_sequence("rnn_fprop_sequence", "rnn", "xg", xg=xg, hg=hg, U=U, h=h, mask=mask)
        for t, p, q in time_steps(xg.shape[0], reverse):
            self.compound_dot(h[p], U, hg)
            self.rnn_fprop_step(xg[t], hg, h[p], h[q], step_of(mask, t), activation)

    def rnn_bprop_sequence(self, h, U, dy, dh, dpre, mask=None, reverse=False,
                           activation="tanh"):
        """The steps of ``rnn_fprop_sequence`` backwards: ``rnn_bprop_step`` each (from the
        state h_t after the step), then dh (+)= dpre_t @ U^T; dpre (T, N, H) out."""
        check_sequence("rnn_bprop_sequence", "rnn", "dpre", dpre=dpre, h=h, U=U, dy=dy, dh=dh,
                       mask=mask)
        T = dpre.shape[0]
        for k, (t, p, q) in enumerate(time_steps(T, reverse, backwards=True)):
            self.rnn_bprop_step(h[q], step_of(dy, t), dh, dpre[t], step_of(mask, t), activation)
            if k < T - 1:
                self.compound_dot(dpre[t], U, dh, beta=1.0 if mask is not None else 0.0,
                                  transB=True)

    def lstm_fprop_sequence(self, gates, hg, U, c, h, mask=None, reverse=False,
                            activation="tanh", gate_activation="logistic"):
        """Steps t = 0..T-1 (T-1..0 with ``reverse``): hg (N, 4H) = h_prev @ U, then
        ``lstm_fprop_step``."""
        check_sequence("lstm_fprop_sequence", "lstm", "gates", gates=gates, hg=hg, U=U, c=c, h=h,
                       mask=mask)
        for t, p, q in time_steps(gates.shape[0], reverse):
            self.compound_dot(h[p], U, hg)
            self.lstm_fprop_step(gates[t], hg, c[p], c[q], h[p], h[q], step_of(mask, t),
                                 activation, gate_activation)

    def lstm_bprop_sequence(self, gates, U, c, dy, dh, dc, dgates, mask=None, reverse=False,
                            activation="tanh", gate_activation="logistic"):
        """The steps of ``lstm_fprop_sequence`` backwards: ``lstm_bprop_step`` each, then (but
        after the last) dh (+)= dgates_t @ U^T.  dy (T, N, H) or None; dh, dc (N, H) in the
        errors reaching the final state; dgates (T, N, 4H) out."""
        check_sequence("lstm_bprop_sequence", "lstm", "gates", gates=gates, U=U, c=c, dy=dy,
                       dh=dh, dc=dc, dgates=dgates, mask=mask)
        T = gates.shape[0]
        for k, (t, p, q) in enumerate(time_steps(T, reverse, backwards=True)):
            self.lstm_bprop_step(gates[t], c[p], c[q], step_of(dy, t), dh, dc, dgates[t],
                                 step_of(mask, t), activation, gate_activation)
            if k < T - 1:
                self.compound_dot(dgates[t], U, dh, beta=1.0 if mask is not None else 0.0,
                                  transB=True)

    def gru_fprop_sequence(self, gates, hg, U, bias_h, hn, h, mask=None, reverse=False):
        """Steps t = 0..T-1 (T-1..0 with ``reverse``): hg (N, 3H) = h_prev @ U, then
        ``gru_fprop_step`` with hn[t] (hn (T, N, H))."""
        check_sequence("gru_fprop_sequence", "gru", "gates", gates=gates, hg=hg, U=U,
                       bias_h=bias_h, hn=hn, h=h, mask=mask)
        for t, p, q in time_steps(gates.shape[0], reverse):
            self.compound_dot(h[p], U, hg)
            self.gru_fprop_step(gates[t], hg, bias_h, hn[t], h[p], h[q], step_of(mask, t))

    def gru_bprop_sequence(self, gates, U, hn, h, dy, dh, dgx, dgh, mask=None, reverse=False):
        """The steps of ``gru_fprop_sequence`` backwards: ``gru_bprop_step`` each, then (but
        after the last) dh += dgh_t @ U^T; dgx, dgh (T, N, 3H) out."""
        check_sequence("gru_bprop_sequence", "gru", "gates", gates=gates, U=U, hn=hn, h=h, dy=dy,
                       dh=dh, dgx=dgx, dgh=dgh, mask=mask)
        T = gates.shape[0]
        for k, (t, p, q) in enumerate(time_steps(T, reverse, backwards=True)):
            self.gru_bprop_step(gates[t], hn[t], h[p], step_of(dy, t), dh, dgx[t], dgh[t],
                                step_of(mask, t))
            if k < T - 1:
                self.compound_dot(dgh[t], U, dh, beta=1.0, transB=True)
