"""Costs.  Every cost is the mean over the rows of the output viewed as (rows, features): the
batch for (N, K) outputs, every token for (N, T, K) sequence outputs.

``cost(be, y, t, work) -> float`` evaluates it; ``bprop(be, y, t, delta)`` writes dcost/dy.
When the layer before a cost is its paired activation (Softmax for CrossEntropyMulti, Logistic
for CrossEntropyBinary), ``fused_errors`` gives the gradient with respect to that
activation's input instead: softmax-cross-entropy runs as one fused backend op.
"""
import numpy as np

from .activation import Logistic, Softmax


def _rows(t):
    return t.size // t.shape[-1]


class Cost:
    fuses_with = None
    takes_indices = False

    def get_description(self):
        return {"type": type(self).__name__, "config": {}}


class CrossEntropyMulti(Cost):
    """-sum_k t_k log y_k, for y a softmax output and t one-hot (or soft) targets.

    ``ignore_index`` (an int, or None): with class-index targets, a target equal to it (a
    padded token's target) adds nothing to the loss, its gradient or the metrics of
    ``Model.eval``, and the loss is averaged over the other targets only (a batch whose every
    target is ignored has loss 0 and gradient 0).  Any int may be given: one outside the
    classes (PyTorch's -100) marks only pads; one inside them (e.g. the pad token's own id)
    means that class is never learned nor scored, wherever it occurs.
    :class:`~neonlite.layers.GeneralizedCost` applies it."""

    fuses_with = Softmax
    eps = 2.0 ** -23
    #: ``fused`` takes int32 class-index targets (N,) / (N, T) where the backend does
    takes_indices = True

    def __init__(self, ignore_index=None):
        if ignore_index is not None and (isinstance(ignore_index, bool) or
                                         not isinstance(ignore_index, (int, np.integer))):
            raise ValueError(f"CrossEntropyMulti: ignore_index must be an integer or null, "
                             f"got {ignore_index!r}")
        self.ignore_index = None if ignore_index is None else int(ignore_index)

    def get_description(self):
        config = {} if self.ignore_index is None else {"ignore_index": self.ignore_index}
        return {"type": type(self).__name__, "config": config}

    def cost(self, be, y, t, work):
        work[:] = be.sum(t * be.log(be.maximum(y, self.eps)))
        return -float(work.get().ravel()[0]) / _rows(y)

    def bprop(self, be, y, t, delta):
        delta[:] = -t / be.maximum(y, self.eps) * (1.0 / _rows(y))

    def fused(self, be, logits, y, t, delta):
        """Softmax + cross-entropy in one op: writes y, delta (w.r.t. logits); returns the cost."""
        rows, k = _rows(logits), logits.shape[-1]
        targets = t.reshape(rows) if t.size == rows else t.reshape(rows, k)
        loss = be.softmax_cross_entropy(logits.reshape(rows, k), targets,
                                        y.reshape(rows, k), delta.reshape(rows, k), 1.0 / rows)
        return loss / rows


class CrossEntropyBinary(Cost):
    """-sum (t log y + (1 - t) log(1 - y)), for y a logistic output and t in [0, 1]."""

    fuses_with = Logistic
    eps = 2.0 ** -23

    def cost(self, be, y, t, work):
        work[:] = be.sum(t * be.log(be.maximum(y, self.eps))
                         + (1.0 - t) * be.log(be.maximum(1.0 - y, self.eps)))
        return -float(work.get().ravel()[0]) / _rows(y)

    def bprop(self, be, y, t, delta):
        delta[:] = (y - t) / be.maximum(y * (1.0 - y), self.eps) * (1.0 / _rows(y))

    def fused(self, be, logits, y, t, delta):
        delta[:] = (y - t) * (1.0 / _rows(y))
        return None


class SumSquared(Cost):
    """0.5 * sum_k (y_k - t_k)^2."""

    def cost(self, be, y, t, work):
        work[:] = be.sum(be.square(y - t))
        return 0.5 * float(work.get().ravel()[0]) / _rows(y)

    def bprop(self, be, y, t, delta):
        delta[:] = (y - t) * (1.0 / _rows(y))


class MeanSquared(Cost):
    """mean_k (y_k - t_k)^2 (the mean over features as well as rows)."""

    def cost(self, be, y, t, work):
        work[:] = be.sum(be.square(y - t))
        return float(work.get().ravel()[0]) / y.size

    def bprop(self, be, y, t, delta):
        delta[:] = (y - t) * (2.0 / y.size)


class SmoothL1Loss(Cost):
    """The mean over every element (features as well as rows, as MeanSquared and PyTorch's
    ``SmoothL1Loss``) of, for d = y - t and a = |d|:  0.5 d^2 / beta where a < beta, else
    a - 0.5 beta; written branch-free with m = min(a, beta) as 0.5 m^2 / beta + (a - m).  Its
    gradient is clip(d, -beta, beta) / beta / size."""

    def __init__(self, beta=1.0):
        if beta <= 0:
            raise ValueError(f"SmoothL1Loss: beta must be positive, got {beta!r}")
        self.beta = float(beta)

    def cost(self, be, y, t, work):
        a = be.absolute(y - t)
        m = be.minimum(a, self.beta)
        work[:] = be.sum(be.square(m) * (0.5 / self.beta) + (a - m))
        return float(work.get().ravel()[0]) / y.size

    def bprop(self, be, y, t, delta):
        delta[:] = be.clip(y - t, -self.beta, self.beta) * (1.0 / (self.beta * y.size))

    def get_description(self):
        return {"type": type(self).__name__, "config": {"beta": self.beta}}
