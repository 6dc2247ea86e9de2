"""The GPU backend's whole-recurrent-sequence passes: the contract's loops over the gate steps
(dispatched by the op table: ``kernels/cuda/recurrent.cu``, one grid-stride kernel per step
over the (N, H) units, every operand contiguous and of one storage, the mask too), on
contiguous (T, N, .) operands, checked before the first step."""
from ..operand_sizes import check_contiguous


class GPURecurrentOps:
    """``Backend.*_sequence`` passes of :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def lstm_fprop_sequence(self, gates, hg, U, c, h, mask=None, reverse=False,
                            activation="tanh", gate_activation="logistic"):
        check_contiguous("lstm_fprop_sequence", gates=gates, hg=hg, c=c, h=h, mask=mask)
        super().lstm_fprop_sequence(gates, hg, U, c, h, mask, reverse, activation,
                                    gate_activation)

    def lstm_bprop_sequence(self, gates, U, c, dy, dh, dc, dgates, mask=None, reverse=False,
                            activation="tanh", gate_activation="logistic"):
        check_contiguous("lstm_bprop_sequence", gates=gates, c=c, dy=dy, dh=dh, dc=dc,
                         dgates=dgates, mask=mask)
        super().lstm_bprop_sequence(gates, U, c, dy, dh, dc, dgates, mask, reverse, activation,
                                    gate_activation)

    def rnn_fprop_sequence(self, xg, hg, U, h, mask=None, reverse=False, activation="tanh"):
        check_contiguous("rnn_fprop_sequence", xg=xg, hg=hg, h=h, mask=mask)
        super().rnn_fprop_sequence(xg, hg, U, h, mask, reverse, activation)

    def rnn_bprop_sequence(self, h, U, dy, dh, dpre, mask=None, reverse=False,
                           activation="tanh"):
        check_contiguous("rnn_bprop_sequence", h=h, dy=dy, dh=dh, dpre=dpre, mask=mask)
        super().rnn_bprop_sequence(h, U, dy, dh, dpre, mask, reverse, activation)

    def gru_fprop_sequence(self, gates, hg, U, bias_h, hn, h, mask=None, reverse=False):
        check_contiguous("gru_fprop_sequence", gates=gates, hg=hg, bias_h=bias_h, hn=hn, h=h,
                         mask=mask)
        super().gru_fprop_sequence(gates, hg, U, bias_h, hn, h, mask, reverse)

    def gru_bprop_sequence(self, gates, U, hn, h, dy, dh, dgx, dgh, mask=None, reverse=False):
        check_contiguous("gru_bprop_sequence", gates=gates, hn=hn, h=h, dy=dy, dh=dh, dgx=dgx,
                         dgh=dgh, mask=mask)
        super().gru_bprop_sequence(gates, U, hn, h, dy, dh, dgx, dgh, mask, reverse)
