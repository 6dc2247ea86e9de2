"""The GPU backend's recurrent gate steps (``kernels/cuda/recurrent.cu``): one grid-stride
kernel per step of a cell over its (N, H) units; see ``Backend.rnn_fprop_step`` and the rest
for the shapes.  Every tensor must be contiguous and share the storage of the state."""
from ..reference.recurrent import ACTIVATION_CODES


class GPURecurrentMixin:
    """``Backend.*_step`` gate kernels for :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def _gate_launch(self, function, tensors, N, H, *codes):
        storage = next(t for t in tensors if t is not None).storage
        for t in tensors:
            if t is not None and (t.storage != storage or not t.is_contiguous):
                raise TypeError(f"{function}: every tensor must be contiguous with the "
                                f"{storage} storage, got {t.storage} {t.shape}")
        func = self.kernel("recurrent", f"{function}_{storage}",
                           "P" * len(tensors) + "i" * (2 + len(codes)))
        args = [0 if t is None else t.ptr for t in tensors] + [int(N), int(H)]
        self.device.launch(func, (self.device.blocks(N * H), 1), (256, 1, 1),
                           args + [int(c) for c in codes])

    def rnn_fprop_step(self, xg, hg, h_prev, h, mask=None, activation="tanh"):
        self._gate_launch("nl_rnn_fprop", (xg, hg, h_prev, h, mask), *h.shape,
                          ACTIVATION_CODES[activation])

    def rnn_bprop_step(self, h, dy, dh, dpre, mask=None, activation="tanh"):
        self._gate_launch("nl_rnn_bprop", (h, dy, dh, dpre, mask), *h.shape,
                          ACTIVATION_CODES[activation])

    def lstm_fprop_step(self, gates, hg, c_prev, c, h_prev, h, mask=None, activation="tanh",
                        gate_activation="logistic"):
        self._gate_launch("nl_lstm_fprop", (gates, hg, c_prev, c, h_prev, h, mask), *h.shape,
                          ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation])

    def lstm_bprop_step(self, gates, c_prev, c, dy, dh, dc, dgates, mask=None,
                        activation="tanh", gate_activation="logistic"):
        self._gate_launch("nl_lstm_bprop", (gates, c_prev, c, dy, dh, dc, dgates, mask),
                          *c.shape, ACTIVATION_CODES[activation],
                          ACTIVATION_CODES[gate_activation])

    def gru_fprop_step(self, gates, hg, bias_h, hn, h_prev, h, mask=None):
        self._gate_launch("nl_gru_fprop", (gates, hg, bias_h, hn, h_prev, h, mask), *h.shape)

    def gru_bprop_step(self, gates, hn, h_prev, dy, dh, dgx, dgh, mask=None):
        self._gate_launch("nl_gru_bprop", (gates, hn, h_prev, dy, dh, dgx, dgh, mask),
                          *h_prev.shape)
