"""Sentence embeddings from token states: mean over the real tokens, the first token (BERT's
pooler input), L2 normalisation."""
import numpy as np

from .layer import Layer


class TokenWeightedSum(Layer):
    """y[n] = sum_t w[n, t] x[n, t]: a sequence x (N, T, d) reduced to (N, d) by per-token
    weights ``self.weights`` (N, 1, T), one batched GEMM each way; bprop spreads the error by
    the same weights.  A subclass fills the weights: once in :meth:`allocate`, or before each
    batch in :meth:`_set_weights`.  Takes sequences of any 1 <= T' <= T steps (T configured):
    the weights and the input gradient are then views of that length."""

    variable_steps = True
    stepped_buffers = ("deltas", "weights")

    def _configure(self, in_shape):
        if len(in_shape) != 2:
            raise self.shape_error("a sequence (T, d)")
        return (in_shape[1],)

    def _set_weights(self):
        """Called before each forward pass; the weights stay as they are by default."""

    def fprop(self, x, inference=False):
        self._set_weights()
        n, d = self.be.bsz, self.in_shape[1]
        self.be.batched_dot(self._weights3(), x, self.outputs.reshape(n, 1, d))
        return self.outputs

    def bprop(self, error):
        if self.needs_deltas:
            n, d = self.be.bsz, self.in_shape[1]
            self.be.batched_dot(self._weights3(), error.reshape(n, 1, d), self.deltas,
                                transA=True)
        return self.deltas

    def _weights3(self):
        """The weights (N, T') as the batched GEMM's (N, 1, T')."""
        return self.weights.reshape(self.be.bsz, 1, self.steps)


class MeanPool(TokenWeightedSum):
    """y[n] = sum_t m[n, t] x[n, t] / sum_t m[n, t]: the mean of a sequence x (N, T, d) over
    its real tokens, (N, d).  The mask m (N, T) is the padding mask of the model's Embedding
    with a ``pad_id`` (wired by the model; 1 at real tokens, 0 at pads), or every token when
    there is none.  An example made only of pads gives zeros."""

    uses_key_mask = True

    def __init__(self, name=None):
        super().__init__(name)
        self.key_mask = None

    def allocate(self):
        super().allocate()
        be, (T, d) = self.be, self.in_shape
        self.weights = be.zeros((be.bsz, T))  # m[n, t] / count[n], (N, 1, T) in fprop
        self.count = be.zeros((be.bsz, 1))

    def _set_weights(self):
        be, T = self.be, self.steps
        w = self.weights
        if self.key_mask is None:
            w[:] = 1.0 / T
            return
        mask = self.mask_view(self.key_mask, T)
        self.count[:] = be.maximum(be.sum(mask, axis=1), 1.0)
        w[:] = mask / self.count


class FirstToken(TokenWeightedSum):
    """y[n] = x[n, 0]: the first token's state of a sequence x (N, T, d), (N, d) (BERT's
    [CLS] token, which its pooler projects).  bprop puts the error at token 0, zeros
    elsewhere."""

    def allocate(self):
        super().allocate()
        be, (T, d) = self.be, self.in_shape
        self.weights = be.zeros((be.bsz, T))  # one-hot at t = 0 of the batch's length
        self.written_steps = None

    def _set_weights(self):
        if self.written_steps != self.steps:
            self.weights[:] = 0.0
            self.weights[:, 0:1] = 1.0
            self.written_steps = self.steps


class L2Normalize(Layer):
    """y = x / max(||x||, eps) over the last axis (sentence-transformers' ``Normalize``:
    unit-length embeddings, so a dot product is the cosine similarity).  Shape-preserving."""

    variable_steps = True  # per token: a sequence (N, T', d) of any 1 <= T' <= T
    stepped_buffers = ("outputs", "deltas", "norm", "dot")

    def __init__(self, eps=1e-12, name=None):
        super().__init__(name)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"L2Normalize: eps must be a number > 0, got {eps!r}")
        self.eps = float(eps)

    def _configure(self, in_shape):
        if len(in_shape) == 0:
            raise self.shape_error("an input with a feature axis")
        return in_shape

    def allocate(self):
        super().allocate()
        rows = self.be.bsz * (self.outputs.size // self.be.bsz) // self.in_shape[-1]
        self.norm = self.be.zeros((rows, 1))
        self.dot = self.be.zeros((rows, 1))

    def _rows(self, t):
        D = self.in_shape[-1]
        return t.reshape(t.size // D, D)

    def fprop(self, x, inference=False):
        be, x2 = self.be, self._rows(x)
        self.norm[:] = be.maximum(be.sqrt(be.sum(x2 * x2, axis=-1)), self.eps)
        self._rows(self.outputs)[:] = x2 / self.norm
        return self.outputs

    def bprop(self, error):
        """dx = (dy - y (y . dy)) / ||x|| (where ||x|| >= eps)."""
        if self.needs_deltas:
            be, y2, e2 = self.be, self._rows(self.outputs), self._rows(error)
            self.dot[:] = be.sum(y2 * e2, axis=-1)
            self._rows(self.deltas)[:] = (e2 - y2 * self.dot) / self.norm
        return self.deltas
