"""The GPU backend's recurrent gate steps (``kernels/cuda/recurrent.cu``): one grid-stride
kernel per step of a cell over its (N, H) units; see ``Backend.rnn_fprop_step`` and the rest
for the shapes.  Every tensor must be contiguous and share the storage of the state (the
mask too: the kernels read it in that type); the whole-sequence passes are the contract's
loops over these steps, on contiguous (T, N, .) operands."""
from ..operand_shapes import check_gate_step
from ..operand_sizes import check_contiguous
from ..shared.recurrent_steps import ACTIVATION_CODES


class GPURecurrentOps:
    """``Backend.*_step`` gate kernels for :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def _gate_step(self, op, cell, state, function, codes, **operands):
        """Check the step's operands (``check_gate_step``; contiguous; the mask in the state's
        storage), then launch kernel ``function`` on them (None passes NULL), N, H, ``codes``."""
        check_gate_step(op, cell, state, **operands)
        check_contiguous(op, **operands)
        first, mask = operands[state], operands.get("mask")
        if mask is not None and mask.storage != first.storage:
            raise TypeError(f"{op}: mask has dtype {mask.dtype}; the GPU kernels read it as "
                            f"{state}'s {first.dtype}")
        tensors = tuple(operands.values())
        N, H = first.shape
        func = self.kernel("recurrent", f"{function}_{first.storage}",
                           "P" * len(tensors) + "i" * (2 + len(codes)))
        args = [0 if t is None else t.ptr for t in tensors] + [int(N), int(H)]
        self.device.launch(func, (self.device.blocks(N * H), 1), (256, 1, 1),
                           args + [int(c) for c in codes])

    def rnn_fprop_step(self, xg, hg, h_prev, h, mask=None, activation="tanh"):
        self._gate_step("rnn_fprop_step", "rnn", "h", "nl_rnn_fprop",
                        (ACTIVATION_CODES[activation],), xg=xg, hg=hg, h_prev=h_prev, h=h,
                        mask=mask)

    def rnn_bprop_step(self, h, dy, dh, dpre, mask=None, activation="tanh"):
        self._gate_step("rnn_bprop_step", "rnn", "h", "nl_rnn_bprop",
                        (ACTIVATION_CODES[activation],), h=h, dy=dy, dh=dh, dpre=dpre,
                        mask=mask)

    def lstm_fprop_step(self, gates, hg, c_prev, c, h_prev, h, mask=None, activation="tanh",
                        gate_activation="logistic"):
        self._gate_step("lstm_fprop_step", "lstm", "h", "nl_lstm_fprop",
                        (ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation]),
                        gates=gates, hg=hg, c_prev=c_prev, c=c, h_prev=h_prev, h=h, mask=mask)

    def lstm_bprop_step(self, gates, c_prev, c, dy, dh, dc, dgates, mask=None,
                        activation="tanh", gate_activation="logistic"):
        self._gate_step("lstm_bprop_step", "lstm", "c", "nl_lstm_bprop",
                        (ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation]),
                        gates=gates, c_prev=c_prev, c=c, dy=dy, dh=dh, dc=dc, dgates=dgates,
                        mask=mask)

    def gru_fprop_step(self, gates, hg, bias_h, hn, h_prev, h, mask=None):
        self._gate_step("gru_fprop_step", "gru", "h", "nl_gru_fprop", (), gates=gates, hg=hg,
                        bias_h=bias_h, hn=hn, h_prev=h_prev, h=h, mask=mask)

    def gru_bprop_step(self, gates, hn, h_prev, dy, dh, dgx, dgh, mask=None):
        self._gate_step("gru_bprop_step", "gru", "h_prev", "nl_gru_bprop", (), gates=gates,
                        hn=hn, h_prev=h_prev, dy=dy, dh=dh, dgx=dgx, dgh=dgh, mask=mask)

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
