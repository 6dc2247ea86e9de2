"""Segment (token-type) embeddings added to a sequence (BERT's sentence A / sentence B)."""
from ..initializers import Gaussian
from .decode import DecodeState
from .layer import ParameterLayer, flat_rows, is_count


class SegmentEmbedding(ParameterLayer):
    """y[n, t] = x[n, t] + W[s[n, t]] for a sequence x (N, T, d) and segment ids s (N, T) in
    [0, segments); table ``W`` (segments, d).

    The segment ids are this layer's second input, set as the attribute ``segment_ids`` (a
    backend tensor (N, T), or None: every token in segment 0, the default) before fprop, as a
    cross-attention layer takes its context.  bprop scatter-adds the error into ``W.grad``
    and passes it through.
    """

    variable_steps = True  # a sequence (N, T', d) of any 1 <= T' <= T; segment ids (N, T')
    stepped_buffers = ("outputs", "rows")

    def __init__(self, segments, d=None, init=None, name=None):
        super().__init__(name)
        if not is_count(segments):
            raise ValueError(f"SegmentEmbedding: segments must be a positive int, got "
                             f"{segments!r}")
        self.segments, self.d = int(segments), d
        self.init = init or Gaussian(scale=0.02)
        self.segment_ids = None

    def _configure(self, in_shape):
        if len(in_shape) != 2 or (self.d is not None and in_shape[1] != self.d):
            raise self.shape_error(f"a sequence (T, {self.d or 'd'})")
        return in_shape

    def param_shapes(self):
        return [(self.segments, self.in_shape[1])]

    def allocate(self):
        self.outputs = self.be.zeros((self.be.bsz,) + self.out_shape)
        T, d = self.in_shape
        self.W = self.add_param("W", (self.segments, d), self.init, self.segments, d)
        self.rows = self.be.zeros((self.be.bsz, T, d))

    def _ids(self, batch):
        ids = self.segment_ids
        if ids is None:
            return None
        if tuple(ids.shape) != (batch, self.steps):
            raise ValueError(f"layer '{self.name}' (SegmentEmbedding): segment_ids must have "
                             f"shape {(batch, self.steps)} (N, T), got "
                             f"{tuple(ids.shape)}")
        return ids

    def fprop(self, x, inference=False):
        self.ids = self._ids(x.shape[0])
        if self.ids is None:  # every token in segment 0: one broadcast add, no gather
            self.outputs[:] = x + self.W.value[0:1]
            return self.outputs
        try:
            self.be.take_rows(self.W.value, self.ids, self.rows)
        except IndexError as err:
            raise ValueError(f"layer '{self.name}' (SegmentEmbedding): segment "
                             f"{err.args[0]} (segments={self.segments})") from None
        self.outputs[:] = x + self.rows
        return self.outputs

    def bprop(self, error):
        if self.ids is None:
            first = self.W.grad[0:1]
            first[:] = first + self.be.sum(flat_rows(error, self.in_shape[1]), axis=0)
        else:
            self.be.scatter_add_rows(self.W.grad, self.ids, error)
        return error

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        state = DecodeState(self.be, batch, max_len)
        state.out = self.be.zeros((batch, 1, self.in_shape[1]))
        return state

    def decode(self, x, state):
        """x (B, 1, d) -> x + W[0] (decoding runs in segment 0)."""
        state.out[:] = x + self.W.value[0:1]
        return state.out
