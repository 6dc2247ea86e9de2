"""The sequence section of the backend contract (see :mod:`.backend` for its conventions): the
whole-sequence passes of recurrent cells, as loops over their gate steps.
:class:`~.backend.Backend` inherits them (the ops the op table dispatches, such as fused
attention, the gate steps and local response normalization, come from ``ops/dispatch.py``;
``ops/softmax.py`` states attention's conventions, ``ops/recurrent.py`` the gate steps')."""
from abc import ABC, abstractmethod

from .operand_shapes import check_sequence, example_rows
from .shared.recurrent_steps import step_of, time_steps


class SequenceOps(ABC):
    """Recurrent sequences of the backend contract."""

    #: the rows ``example_dropout_mask`` reads its mask as (checked)
    example_rows = staticmethod(example_rows)

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
