"""Layers around the recurrent cells: the sequence reductions :class:`RecurrentLast`,
:class:`RecurrentSum`, :class:`RecurrentMean` ((N, T, H) -> (N, H)); the bidirectional
:class:`BiRNN`, :class:`BiLSTM`, :class:`BiGRU`; and the stacks :class:`DeepBiRNN`,
:class:`DeepBiLSTM`."""
from .containers import Sequential
from .layer import Layer
from .sentence import TokenWeightedSum
from .recurrent import GRU, LSTM, Recurrent

MERGES = ("concat", "sum")


class _SequenceReduction(TokenWeightedSum):
    """(N, T', H) -> (N, H) over the time axis, for sequences of 1 to T steps (T configured),
    as a token-weighted sum (one batched GEMM each way).  With the padding mask of an
    Embedding with a ``pad_id`` before it (wired by the model, ``key_mask``; sequences padded
    at the end) the pads take no part: the weights are made from the mask each batch."""

    uses_key_mask = True

    def __init__(self, name=None):
        super().__init__(name)
        self.key_mask = None

    def _configure(self, in_shape):
        if len(in_shape) != 2:
            raise self.shape_error("a sequence (T, H) per example")
        self.T = in_shape[0]
        return (in_shape[1],)

    def allocate(self):
        super().allocate()
        self.weights = self.be.zeros((self.be.bsz, self.T))
        self.count = self.be.zeros((self.be.bsz, 1))

    def _mask(self):
        return self.mask_view(self.key_mask, self.steps)


class RecurrentLast(_SequenceReduction):
    """The output of the last step, y = x[:, T'-1]; with a padding mask, of each sequence's
    last real step (a sequence made only of pads gives zeros)."""

    def _set_weights(self):
        w, T, mask = self.weights, self.steps, self._mask()
        if mask is None:
            w[:] = 0.0
            w[:, T - 1:T] = 1.0
            return
        if T > 1:  # 1 at the real steps followed by a pad
            w[:, 0:T - 1] = mask[:, 0:T - 1] - mask[:, 1:T]
        w[:, T - 1:T] = mask[:, T - 1:T]


class RecurrentSum(_SequenceReduction):
    """y = sum over t of x[:, t] (over the real steps, with a padding mask)."""

    mean = False

    def _set_weights(self):
        w, mask = self.weights, self._mask()
        if mask is None:
            w[:] = 1.0 / self.steps if self.mean else 1.0
        elif self.mean:
            self.count[:] = self.be.maximum(self.be.sum(mask, axis=1), 1.0)
            w[:] = mask / self.count
        else:
            w[:] = mask


class RecurrentMean(RecurrentSum):
    """y = mean over t of x[:, t] (the T' steps of the sequence given; with a padding mask,
    its real steps: a sequence made only of pads gives zeros)."""

    mean = True


class _Bidirectional(Layer):
    """A forward cell and a reversed one over the same sequence, outputs concatenated
    (``merge="concat"``: (N, T, 2H), forward first, as PyTorch's bidirectional layers) or
    summed ((N, T, H)).  With ``return_sequences=False`` each direction gives its final state
    (the reversed one's is at t = 0).  Parameters ``<name>.fwd.*`` and ``<name>.bwd.*``."""

    cell = None
    variable_steps = True

    def __init__(self, nout, init=None, merge="concat", return_sequences=True, name=None,
                 **cell_args):
        super().__init__(name)
        if merge not in MERGES:
            raise ValueError(f"{type(self).__name__}: merge must be one of {MERGES}, got "
                             f"{merge!r}")
        self.merge, self.nout = merge, nout
        self.fwd = self.cell(nout, init=init, return_sequences=return_sequences, **cell_args)
        self.bwd = self.cell(nout, init=init, return_sequences=return_sequences, reverse=True,
                             **cell_args)
        self.mask = None

    def name_children(self):
        self.fwd.name, self.bwd.name = f"{self.name}.fwd", f"{self.name}.bwd"

    def _configure(self, in_shape):
        shape = self.fwd.configure(in_shape, self.prev_name)
        self.bwd.configure(in_shape, self.prev_name)
        if self.merge == "concat":
            shape = shape[:-1] + (2 * shape[-1],)
        return shape

    @property
    def stepped_buffers(self):
        """The output is per step only with ``return_sequences``."""
        return ("outputs", "deltas") if self.fwd.return_sequences else ("deltas",)

    def allocate(self):
        super().allocate()
        self.fwd.allocate()
        self.bwd.allocate()

    def set_needs_deltas(self, needed):
        self.needs_deltas = needed
        self.fwd.set_needs_deltas(needed)
        self.bwd.set_needs_deltas(needed)

    def _halves(self, t):
        H = self.nout
        return (t[..., :H], t[..., H:]) if self.merge == "concat" else (t, t)

    def fprop(self, x, inference=False, mask=None):
        mask = self.mask_view(mask if mask is not None else self.mask, x.shape[1])
        f = self.fwd.fprop(x, inference, mask)
        b = self.bwd.fprop(x, inference, mask)
        if self.merge == "sum":
            self.outputs[:] = f + b
        else:
            first, second = self._halves(self.outputs)
            first[:] = f
            second[:] = b
        return self.outputs

    def bprop(self, error):
        first, second = self._halves(error)
        df = self.fwd.bprop(first)
        db = self.bwd.bprop(second)
        if self.needs_deltas:
            self.deltas[:] = df + db
        return self.deltas

    def parameters(self):
        return self.fwd.parameters() + self.bwd.parameters()

    def leaves(self):
        return [self.fwd, self.bwd]


class BiRNN(_Bidirectional):
    """Bidirectional :class:`Recurrent` (``activation``, ``init_inner`` as there)."""
    cell = Recurrent

    def __init__(self, nout, init=None, merge="concat", return_sequences=True,
                 activation=None, init_inner=None, name=None):
        super().__init__(nout, init, merge, return_sequences, name, activation=activation,
                         init_inner=init_inner)


class BiLSTM(_Bidirectional):
    """Bidirectional :class:`LSTM` (``activation``, ``gate_activation``, ``forget_bias``,
    ``init_inner`` as there)."""
    cell = LSTM

    def __init__(self, nout, init=None, merge="concat", return_sequences=True,
                 activation=None, gate_activation=None, init_inner=None, forget_bias=0.0,
                 name=None):
        super().__init__(nout, init, merge, return_sequences, name, activation=activation,
                         gate_activation=gate_activation, init_inner=init_inner,
                         forget_bias=forget_bias)


class BiGRU(_Bidirectional):
    """Bidirectional :class:`GRU` (``init_inner`` as there)."""
    cell = GRU

    def __init__(self, nout, init=None, merge="concat", return_sequences=True,
                 init_inner=None, name=None):
        super().__init__(nout, init, merge, return_sequences, name, init_inner=init_inner)


class _DeepBidirectional(Sequential):
    """``depth`` bidirectional layers of ``nout`` units each, stacked (each one's merged
    sequence feeds the next); the last may return only its final states."""

    bidirectional = None
    unnamed_description = None

    def __init__(self, nout, init=None, depth=2, merge="concat", return_sequences=True,
                 name=None, **cell_args):
        if depth < 1:
            raise ValueError(f"{type(self).__name__}: depth must be at least 1, got {depth!r}")
        layers = [self.bidirectional(nout, init=init, merge=merge,
                                     return_sequences=return_sequences or i < depth - 1,
                                     **cell_args) for i in range(depth)]
        super().__init__(layers, name)


class DeepBiRNN(_DeepBidirectional):
    """A stack of :class:`BiRNN` layers."""
    bidirectional = BiRNN

    def __init__(self, nout, init=None, depth=2, merge="concat", return_sequences=True,
                 activation=None, init_inner=None, name=None):
        super().__init__(nout, init, depth, merge, return_sequences, name,
                         activation=activation, init_inner=init_inner)


class DeepBiLSTM(_DeepBidirectional):
    """A stack of :class:`BiLSTM` layers."""
    bidirectional = BiLSTM

    def __init__(self, nout, init=None, depth=2, merge="concat", return_sequences=True,
                 activation=None, gate_activation=None, init_inner=None, forget_bias=0.0,
                 name=None):
        super().__init__(nout, init, depth, merge, return_sequences, name,
                         activation=activation, gate_activation=gate_activation,
                         init_inner=init_inner, forget_bias=forget_bias)
