"""Recurrent layers over sequences (N, T, D): :class:`Recurrent`, :class:`LSTM`, :class:`GRU`.

Every cell runs the same schedule (``RecurrentBase``):

* the input is permuted once to time-major (T, N, D), so each step's rows are contiguous;
* the input projection of all T steps is one GEMM, (T*N, D) @ W (D, G*H), plus the bias;
* the T steps are one call of the backend's whole-sequence pass of the cell
  (``Backend.rnn_fprop_sequence``, ``lstm_fprop_sequence``, ``gru_fprop_sequence``; the loop
  over time in the backend's own code where it has one): each step one recurrent GEMM
  h_{t-1} @ U (N, H) @ (H, G*H) and the cell's fused gate kernel (``Backend.*_fprop_step``),
  which writes the activated gates kept for bprop;
* bprop walks the steps backwards (``Backend.*_bprop_sequence``), each one gate-derivative
  kernel and one GEMM dgates_t @ U^T; then the weight gradients are one GEMM each over all
  the stored steps:
  dW = X^T dG, dU = H_prev^T dG, db = column sums of dG, and the input error one GEMM dG W^T.

Every T-step buffer is made in ``allocate()``.  A sequence may be shorter than the T the
layer was configured for, never longer: the time-major buffers' first T' steps are used, and
the output and input gradient (N, T', .) are the views of that length of theirs
(:meth:`~neonlite.layers.layer.Layer.set_steps`).

``mask`` (N, T) (1: a real step, 0: padding; a tensor or a host array), given to ``fprop`` or
set as ``layer.mask``:
a padded step neither changes the state nor takes gradient, and its output is 0.  With
right-padded sequences ``return_sequences=False`` gives each sequence's last real state.

``stateful=True`` (truncated backpropagation through time): each fprop starts from the final
state of the previous one; ``reset_state()`` (the :class:`~neonlite.callbacks.ResetState`
callback, at each epoch) returns to the initial state, zeros unless ``set_initial_state`` gave
one.  ``reverse=True`` walks the sequence from its last step to its first (the backward half of
a bidirectional layer); outputs stay in time order.
"""
import numpy as np

from ..backends.reference.recurrent import ACTIVATIONS
from ..initializers import Constant, GlorotUniform
from ..transforms.activation import Identity, Logistic, Rectlin, Tanh
from .layer import ParameterLayer, ShapeError


def kernel_activation(transform, what, layer):
    """The gate kernels' name for activation ``transform`` (Tanh, Logistic, Rectlin with slope
    0, Identity); a ``ValueError`` naming the layer otherwise."""
    if isinstance(transform, Tanh):
        return "tanh"
    if isinstance(transform, Logistic):
        return "logistic"
    if isinstance(transform, Rectlin) and transform.slope == 0:
        return "relu"
    if isinstance(transform, Identity):
        return "identity"
    raise ValueError(f"layer '{layer.name}' ({type(layer).__name__}): the {what} must be one of "
                     f"Tanh, Logistic, Rectlin (slope 0) or Identity (the gate kernels' "
                     f"{', '.join(ACTIVATIONS)}), got {transform!r}")


class RecurrentBase(ParameterLayer):
    """The shared T-step schedule (module docstring).  A cell sets ``gates`` (G, the gate
    blocks per unit) and runs all the steps in ``_fprop_steps`` / ``_bprop_steps`` (through
    the backend's whole-sequence pass of the cell) and one decoding step in ``_decode_step``.

    Parameters: W (D, G*H), U (H, G*H), b (G*H,).  Output (N, T, H) with
    ``return_sequences``, else the final state (N, H).
    """

    checks_own_batch = True  # x may be shorter than T (``_steps``); bprop: ``_check_error``
    variable_steps = True

    gates = 1
    states = ("h",)

    def __init__(self, nout, init=None, init_inner=None, return_sequences=True, stateful=False,
                 reverse=False, name=None):
        super().__init__(name)
        if not isinstance(nout, (int, np.integer)) or nout < 1:
            raise ValueError(f"{type(self).__name__}: nout must be a positive int, got {nout!r}")
        self.nout = int(nout)
        self.init = init or GlorotUniform()
        self.init_inner = init_inner or self.init
        self.return_sequences = bool(return_sequences)
        self.stateful = bool(stateful)
        self.reverse = bool(reverse)
        self.mask = None
        self._initial = {}

    # ---- configuration -------------------------------------------------------------------------
    def _configure(self, in_shape):
        if len(in_shape) != 2:
            raise self.shape_error("a sequence (T, D) per example")
        self.T, self.nin = in_shape
        return (self.T, self.nout) if self.return_sequences else (self.nout,)

    @property
    def stepped_buffers(self):
        """The output is per step only with ``return_sequences``."""
        return ("outputs", "deltas") if self.return_sequences else ("deltas",)

    def param_shapes(self):
        H, G = self.nout, self.gates
        return [(self.nin, G * H), (H, G * H), (G * H,)] + self._cell_param_shapes()

    def _cell_param_shapes(self):
        """Parameters a cell adds to W, U and b (GRU: b_h)."""
        return []

    def allocate(self):
        super().allocate()
        be, N, T, H, G = self.be, self.be.bsz, self.T, self.nout, self.gates
        self.W = self.add_param("W", (self.nin, G * H), self.init, self.nin, G * H)
        self.U = self.add_param("U", (H, G * H), self.init_inner, H, G * H)
        self.b = self.add_param("b", (G * H,), Constant(0.0), H, G * H)
        self.x_t = be.zeros((T, N, self.nin))
        self.dx_t = be.zeros((T, N, self.nin))
        self.g_t = be.zeros((T, N, G * H))
        self.dg_t = be.zeros((T, N, G * H))
        self.hg = be.zeros((N, G * H))
        self.dy_t = be.zeros((T, N, H))
        self.mask_t = be.zeros((T, N))
        self.mask_in = be.zeros((N, T))
        self.seq = {s: be.zeros((T + 1, N, H)) for s in self.states}
        self.delta_state = {s: be.zeros((N, H)) for s in self.states}
        self.carry = {s: be.zeros((N, H)) for s in self.states}
        self.initial = {s: be.zeros((N, H)) for s in self.states}
        for s, value in self._initial.items():
            self.initial[s].set(value)
        self._allocate_cell()

    def _allocate_cell(self):
        """Cell-specific buffers and parameters."""

    # ---- state ---------------------------------------------------------------------------------
    def set_initial_state(self, **states):
        """The state a sequence starts from (``h=`` (N, H); an LSTM also ``c=``), host arrays;
        zeros by default.  A stateful layer returns to it on ``reset_state()``."""
        for s, value in states.items():
            if s not in self.states:
                raise ValueError(f"layer '{self.name}' ({type(self).__name__}) has the states "
                                 f"{self.states}, not {s!r}")
            value = np.asarray(value)
            self._initial[s] = value
            if self.outputs is not None:
                self.initial[s].set(value)
                self.carry[s].set(value)

    def reset_state(self):
        """A stateful layer's next fprop starts from the initial state again."""
        if self.outputs is not None:
            for s in self.states:
                self.carry[s][:] = self.initial[s]

    def state(self):
        """The carried state as host arrays ``{name: (N, H)}`` (what the next fprop of a
        stateful layer starts from)."""
        return {s: self.carry[s].get() for s in self.states}

    def set_state(self, **states):
        """Set the carried state (host arrays (N, H)), e.g. when resuming from a checkpoint."""
        for s, value in states.items():
            self.carry[s].set(np.asarray(value))

    def buffers(self):
        """Nothing: the carried state is per batch row, so it is not saved with the weights (a
        checkpoint then loads into any batch size, e.g. for ``neonlite generate``); it is
        saved apart, see :meth:`carried_states`."""
        return {}

    def carried_states(self):
        """``{state name: tensor (N, H)}``: what a stateful layer carries to its next
        minibatch (empty when not stateful).  Checkpoints keep it under ``/layer_states`` and
        ``--resume`` restores it, so resuming is bit-exact inside an epoch too."""
        return dict(self.carry) if self.stateful and self.outputs is not None else {}

    # ---- incremental decoding (``layers/decode.py``) ----------------------------------------------
    def init_decode(self, batch, max_len):
        """A decoding state: the cell's state (h, and c for an LSTM) (batch, H), starting at
        the initial state, and one step's buffers; ``reset()`` returns to the initial state."""
        if self.reverse or not self.return_sequences:
            raise TypeError(f"layer '{self.name}' ({type(self).__name__}): incremental decoding "
                            f"needs a forward layer with return_sequences=True")
        from .decode import DecodeState
        be, H, GH = self.be, self.nout, self.gates * self.nout
        layer = self

        class _State(DecodeState):
            def reset(self):
                super().reset()
                for s in layer.states:
                    self.h[s][:] = 0.0 if batch != be.bsz else layer.initial[s]

        state = _State(be, batch, max_len)
        state.h = {s: be.zeros((batch, H)) for s in self.states}
        state.gates, state.hg = be.zeros((batch, GH)), be.zeros((batch, GH))
        state.hn, state.out = be.zeros((batch, H)), be.zeros((batch, 1, H))
        state.reset()
        return state

    def decode(self, x, state):
        """x (B, 1, D) -> h (B, 1, H): one step from the state kept in ``state``."""
        be, B = self.be, x.shape[0]
        be.compound_dot(x.reshape(B, self.nin), self.W.value, state.gates)
        state.gates[:] = state.gates + self.b.value
        h = state.h["h"]
        be.compound_dot(h, self.U.value, state.hg)
        self._decode_step(state)
        state.out.reshape(B, self.nout)[:] = h
        state.pos += 1
        return state.out

    # ---- the schedule ---------------------------------------------------------------------------
    def _check_error(self, error):
        """The output gradient must match the last fprop's output: (N, T', H) for its T'
        steps with ``return_sequences``, else (N, H)."""
        shape = (self.T_run, self.nout) if self.return_sequences else (self.nout,)
        self.check_batch(error, shape, "output gradient", "as the last fprop gave")

    def _steps(self, x, mask):
        """Check x (N, T', D) and mask; returns T'."""
        N, T = x.shape[0], x.shape[1] if len(x.shape) == 3 else -1
        if len(x.shape) != 3 or x.shape[2] != self.nin or N != self.be.bsz:
            raise ShapeError(f"layer '{self.name}' ({type(self).__name__}): expected a sequence "
                             f"batch ({self.be.bsz}, T, {self.nin}), got {tuple(x.shape)}")
        if T > self.T or T < 1:
            raise ShapeError(f"layer '{self.name}' ({type(self).__name__}): a sequence of {T} "
                             f"steps, but the layer was allocated for at most {self.T}")
        if mask is not None and not isinstance(mask, np.ndarray) and \
                np.dtype(mask.dtype) != np.dtype(self.be.dtype):
            raise ShapeError(f"layer '{self.name}' ({type(self).__name__}): the mask must be a "
                             f"tensor of the backend's dtype {np.dtype(self.be.dtype)}, got "
                             f"{np.dtype(mask.dtype)}")
        if mask is not None and tuple(np.shape(mask)) != (N, T):
            raise ShapeError(f"layer '{self.name}' ({type(self).__name__}): mask must have "
                             f"shape {(N, T)} (N, T), got {tuple(np.shape(mask))}")
        return T

    def _mask_tensor(self, mask, T):
        """``mask`` as a tensor: a host array is copied into the layer's own buffer."""
        if mask is None or not isinstance(mask, np.ndarray):
            return mask
        buf = self.mask_in if T == self.T else self.mask_in[:, :T]
        buf.set(mask)
        return buf

    def fprop(self, x, inference=False, mask=None):
        be, H = self.be, self.nout
        mask = mask if mask is not None else self.mask
        if len(x.shape) == 3:
            mask = self.mask_view(mask, x.shape[1])
        T = self._steps(x, mask)
        self.set_steps(T)
        mask = self._mask_tensor(mask, T)
        self.T_run, self.masked = T, mask is not None
        N = x.shape[0]
        x_t, g_t = self.x_t[:T], self.g_t[:T]
        be.permute_axes(x, x_t, (1, 0, 2))
        if mask is not None:
            be.permute_axes(mask, self.mask_t[:T], (1, 0))
        g2 = g_t.reshape(T * N, self.gates * H)
        be.compound_dot(x_t.reshape(T * N, self.nin), self.W.value, g2)
        g2[:] = g2 + self.b.value
        first = T if self.reverse else 0
        for s in self.states:
            self.seq[s][first] = self.carry[s] if self.stateful else self.initial[s]
        self._fprop_steps(T)
        last = 0 if self.reverse else T
        if self.stateful:
            for s in self.states:
                self.carry[s][:] = self.seq[s][last]
        return self._write_outputs(T)

    def _fprop_steps(self, T):
        """The T steps from ``seq[s][0]`` (``[T]`` with ``reverse``) through the gates g_t[:T],
        each the recurrent GEMM and the cell's gate kernel, into ``seq``."""
        raise NotImplementedError

    def _step_mask(self, T):
        """The time-major mask (T, N) of the last fprop, or None."""
        return self.mask_t[:T] if self.masked else None

    def _write_outputs(self, T):
        be, h = self.be, self.seq["h"]
        if not self.return_sequences:
            self.outputs[:] = h[0 if self.reverse else T]
            return self.outputs
        steps = h[0:T] if self.reverse else h[1:T + 1]
        out = self.outputs
        be.permute_axes(steps, out, (1, 0, 2))
        if self.masked:
            self._apply_mask(out, T)
        return out

    def _apply_mask(self, seq, T):
        """seq (N, T, H) *= mask, through the time-major mask (T, N)."""
        tm = self.dy_t[:T]
        self.be.permute_axes(seq, tm, (1, 0, 2))
        tm[:] = tm * self.mask_t[:T].reshape(T, seq.shape[0], 1)
        self.be.permute_axes(tm, seq, (1, 0, 2))

    def bprop(self, error):
        be, T, H = self.be, self.T_run, self.nout
        self._check_error(error)
        N = error.shape[0]
        dy = self.dy_t[:T]
        for s in self.states:
            self.delta_state[s][:] = 0.0
        if self.return_sequences:
            be.permute_axes(error, dy, (1, 0, 2))
            if self.masked:
                dy[:] = dy * self.mask_t[:T].reshape(T, N, 1)
        else:
            self.delta_state["h"][:] = error
        self._bprop_steps(T, dy if self.return_sequences else None)
        self._weight_grads(T, N)
        if self.needs_deltas:
            dx_t = self.dx_t[:T]
            be.compound_dot(self.dg_t[:T].reshape(T * N, self.gates * H), self.W.value,
                            dx_t.reshape(T * N, self.nin), transB=True)
            be.permute_axes(dx_t, self.deltas, (1, 0, 2))
        return self.deltas

    def _bprop_steps(self, T, dy):
        """The steps backwards, each the cell's gate-derivative kernel into dg_t and (but the
        last) the GEMM of its gradient with U^T into ``delta_state``; dy (T, N, H) or None."""
        raise NotImplementedError

    def _weight_grads(self, T, N):
        """dW = X^T dG, dU = H_prev^T dG_h, db = sum dG (one GEMM or sum each, all steps)."""
        be, GH = self.be, self.gates * self.nout
        dg = self.dg_t[:T].reshape(T * N, GH)
        be.compound_dot(self.x_t[:T].reshape(T * N, self.nin), dg, self.W.grad, beta=1.0,
                        transA=True)
        h = self.seq["h"]
        h_prev = h[1:T + 1] if self.reverse else h[0:T]
        be.compound_dot(h_prev.reshape(T * N, self.nout), self._recurrent_grads(T, N),
                        self.U.grad, beta=1.0, transA=True)
        b2 = self.b.grad.reshape(1, GH)
        b2[:] = b2 + be.sum(dg, axis=0)

    def _recurrent_grads(self, T, N):
        """The gradients of the recurrent products (T*N, G*H) (the gate gradients unless the
        cell's recurrent term differs)."""
        return self.dg_t[:T].reshape(T * N, self.gates * self.nout)

    def _decode_step(self, state):
        """One step of ``decode`` after its GEMMs: the cell's gate kernel on ``state``."""
        raise NotImplementedError


class Recurrent(RecurrentBase):
    """h_t = act(x_t W + h_{t-1} U + b).  W (D, H), U (H, H), b (H,); ``activation`` one of
    Tanh (default), Logistic, Rectlin, Identity.  See the module docstring for sequences,
    masks and state."""

    def __init__(self, nout, init=None, activation=None, init_inner=None, return_sequences=True,
                 stateful=False, reverse=False, name=None):
        super().__init__(nout, init, init_inner, return_sequences, stateful, reverse, name)
        self.activation = activation or Tanh()

    def _configure(self, in_shape):
        self.act = kernel_activation(self.activation, "activation", self)
        return super()._configure(in_shape)

    def _fprop_steps(self, T):
        self.be.rnn_fprop_sequence(self.g_t[:T], self.hg, self.U.value, self.seq["h"][:T + 1],
                                   self._step_mask(T), self.reverse, self.act)

    def _bprop_steps(self, T, dy):
        self.be.rnn_bprop_sequence(self.seq["h"][:T + 1], self.U.value, dy,
                                   self.delta_state["h"], self.dg_t[:T], self._step_mask(T),
                                   self.reverse, self.act)

    def _decode_step(self, state):
        h = state.h["h"]
        self.be.rnn_fprop_step(state.gates, state.hg, h, h, None, self.act)


class LSTM(RecurrentBase):
    """Long short-term memory.  Gate order (i, f, g, o) in every (.., 4H) block, as PyTorch:

        [i | f | g | o] = x_t W + h_{t-1} U + b,   W (D, 4H), U (H, 4H), b (4H,)
        i, f, o = gate_act(.),  g = act(.),  c_t = f c_{t-1} + i g,  h_t = o act(c_t)

    ``forget_bias`` initializes the f block of b (neon's and Jozefowicz et al.'s 1.0 helps
    long memories; 0 matches PyTorch's zero-initialized layout).  ``activation``
    (default Tanh) and ``gate_activation`` (default Logistic): Tanh, Logistic, Rectlin or
    Identity.  The state is (h, c).  See the module docstring for sequences, masks and state.
    """

    gates = 4
    states = ("h", "c")

    def __init__(self, nout, init=None, activation=None, gate_activation=None, init_inner=None,
                 forget_bias=0.0, return_sequences=True, stateful=False, reverse=False,
                 name=None):
        super().__init__(nout, init, init_inner, return_sequences, stateful, reverse, name)
        self.activation = activation or Tanh()
        self.gate_activation = gate_activation or Logistic()
        self.forget_bias = float(forget_bias)

    def _configure(self, in_shape):
        self.act = kernel_activation(self.activation, "activation", self)
        self.gate_act = kernel_activation(self.gate_activation, "gate_activation", self)
        return super()._configure(in_shape)

    def _allocate_cell(self):
        if self.forget_bias:
            b = self.b.value.get()
            b[self.nout:2 * self.nout] = self.forget_bias
            self.b.value.set(b)

    def _fprop_steps(self, T):
        self.be.lstm_fprop_sequence(self.g_t[:T], self.hg, self.U.value, self.seq["c"][:T + 1],
                                    self.seq["h"][:T + 1], self._step_mask(T), self.reverse,
                                    self.act, self.gate_act)

    def _bprop_steps(self, T, dy):
        self.be.lstm_bprop_sequence(self.g_t[:T], self.U.value, self.seq["c"][:T + 1], dy,
                                    self.delta_state["h"], self.delta_state["c"], self.dg_t[:T],
                                    self._step_mask(T), self.reverse, self.act, self.gate_act)

    def _decode_step(self, state):
        h, c = state.h["h"], state.h["c"]
        self.be.lstm_fprop_step(state.gates, state.hg, c, c, h, h, None, self.act, self.gate_act)


class GRU(RecurrentBase):
    """Gated recurrent unit with PyTorch's convention (``torch.nn.GRU``), gate order (r, z, n):

        [xr | xz | xn] = x_t W + b,   [hr | hz | hn] = h_{t-1} U + b_h
        r = sig(xr + hr),  z = sig(xz + hz),  n = tanh(xn + r * hn),  h_t = (1 - z) n + z h_{t-1}

    W (D, 3H), U (H, 3H), b and b_h (3H,) (the reset gate multiplies the recurrent term with
    its bias, so b_h is a parameter of its own).  See the module docstring for sequences,
    masks and state.
    """

    gates = 3

    def _cell_param_shapes(self):
        return [(3 * self.nout,)]

    def _allocate_cell(self):
        be, N, T, H = self.be, self.be.bsz, self.T, self.nout
        self.b_h = self.add_param("b_h", (3 * H,), Constant(0.0), H, 3 * H)
        self.hn_t = be.zeros((T, N, H))
        self.dgh_t = be.zeros((T, N, 3 * H))

    def _fprop_steps(self, T):
        self.be.gru_fprop_sequence(self.g_t[:T], self.hg, self.U.value, self.b_h.value,
                                   self.hn_t[:T], self.seq["h"][:T + 1], self._step_mask(T),
                                   self.reverse)

    def _bprop_steps(self, T, dy):
        self.be.gru_bprop_sequence(self.g_t[:T], self.U.value, self.hn_t[:T],
                                   self.seq["h"][:T + 1], dy, self.delta_state["h"],
                                   self.dg_t[:T], self.dgh_t[:T], self._step_mask(T),
                                   self.reverse)

    def _decode_step(self, state):
        h = state.h["h"]
        self.be.gru_fprop_step(state.gates, state.hg, self.b_h.value, state.hn, h, h, None)

    def _recurrent_grads(self, T, N):
        dgh = self.dgh_t[:T].reshape(T * N, 3 * self.nout)
        bh = self.b_h.grad.reshape(1, 3 * self.nout)
        bh[:] = bh + self.be.sum(dgh, axis=0)
        return dgh
