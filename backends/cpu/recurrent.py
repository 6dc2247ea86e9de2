"""The CPU backend's recurrent gate steps: the C kernels of ``kernels/cpu/recurrent.c`` for
contiguous float32/float64 rows, and the numpy reference (``numpy_recurrent``) for every other
case.  Each method is one step of one cell; see ``Backend.rnn_fprop_step`` and the rest for
the shapes."""
from ..reference import recurrent as reference

ACTIVATION_CODES = reference.ACTIVATION_CODES


def _ary(t):
    return None if t is None else t._ary


class CPURecurrentMixin:
    """``Backend.*_step`` gate kernels for the CPU backend (mixed into ``CPUBackend``)."""

    def _gate_kernel(self, name, tensors, N, H, *codes):
        """Run C function ``name`` on ``tensors`` (None passes NULL) then N, H and ``codes``;
        False when the C kernels cannot take these arrays."""
        arrays = [a for a in tensors if a is not None]
        module = self.kernels._usable("recurrent", *arrays)
        if module is None:
            return False
        ffi = module.ffi
        args = [ffi.NULL if a is None else ffi.from_buffer("real[]", a) for a in tensors]
        getattr(module.lib, name)(*args, N, H, *codes)
        return True

    def rnn_fprop_step(self, xg, hg, h_prev, h, mask=None, activation="tanh"):
        arrays = [_ary(t) for t in (xg, hg, h_prev, h, mask)]
        N, H = h.shape
        if not self._gate_kernel("rnn_fprop_step", arrays, N, H, ACTIVATION_CODES[activation]):
            reference.rnn_fprop_step(*arrays, activation)

    def rnn_bprop_step(self, h, dy, dh, dpre, mask=None, activation="tanh"):
        arrays = [_ary(t) for t in (h, dy, dh, dpre, mask)]
        N, H = h.shape
        if not self._gate_kernel("rnn_bprop_step", arrays, N, H, ACTIVATION_CODES[activation]):
            reference.rnn_bprop_step(*arrays, activation)

    def lstm_fprop_step(self, gates, hg, c_prev, c, h_prev, h, mask=None, activation="tanh",
                        gate_activation="logistic"):
        arrays = [_ary(t) for t in (gates, hg, c_prev, c, h_prev, h, mask)]
        N, H = h.shape
        codes = (ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation])
        if not self._gate_kernel("lstm_fprop_step", arrays, N, H, *codes):
            reference.lstm_fprop_step(*arrays, activation, gate_activation)

    def lstm_bprop_step(self, gates, c_prev, c, dy, dh, dc, dgates, mask=None,
                        activation="tanh", gate_activation="logistic"):
        arrays = [_ary(t) for t in (gates, c_prev, c, dy, dh, dc, dgates, mask)]
        N, H = c.shape
        codes = (ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation])
        if not self._gate_kernel("lstm_bprop_step", arrays, N, H, *codes):
            reference.lstm_bprop_step(*arrays, activation, gate_activation)

    def gru_fprop_step(self, gates, hg, bias_h, hn, h_prev, h, mask=None):
        arrays = [_ary(t) for t in (gates, hg, bias_h, hn, h_prev, h, mask)]
        N, H = h.shape
        if not self._gate_kernel("gru_fprop_step", arrays, N, H):
            reference.gru_fprop_step(*arrays)

    def gru_bprop_step(self, gates, hn, h_prev, dy, dh, dgx, dgh, mask=None):
        arrays = [_ary(t) for t in (gates, hn, h_prev, dy, dh, dgx, dgh, mask)]
        N, H = h_prev.shape
        if not self._gate_kernel("gru_bprop_step", arrays, N, H):
            reference.gru_bprop_step(*arrays)
