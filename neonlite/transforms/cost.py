"""Costs.  Every cost is the mean over the rows of the output viewed as (rows, features): the
batch for (N, K) outputs, every token for (N, T, K) sequence outputs.

``cost(be, y, t, work) -> float`` evaluates it; ``bprop(be, y, t, delta)`` writes dcost/dy.
When the layer before a cost is its paired activation (Softmax for CrossEntropyMulti, Logistic
for CrossEntropyBinary), ``fused_errors`` gives the gradient with respect to that
activation's input instead: softmax-cross-entropy runs as one fused backend op.
"""
from .activation import Logistic, Softmax


def _rows(t):
    return t.size // t.shape[-1]


class Cost:
    fuses_with = None
    takes_indices = False

    def get_description(self):
        return {"type": type(self).__name__, "config": {}}


class CrossEntropyMulti(Cost):
    """-sum_k t_k log y_k, for y a softmax output and t one-hot (or soft) targets."""

    fuses_with = Softmax
    eps = 2.0 ** -23
    #: ``fused`` takes int32 class-index targets (N,) / (N, T) where the backend does
    takes_indices = True

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
