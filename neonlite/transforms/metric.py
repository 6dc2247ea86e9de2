"""Metrics, computed on host arrays of one batch.

``metric(y, t)`` takes outputs y (rows, K) and targets t (rows, K) one-hot (or (rows,) class
indices) and returns the per-row values; the model averages them over the real rows of a data
set (the padding of a partial last batch excluded).
"""
import numpy as np


def _labels(t, y):
    """Class labels (rows,) of targets ``t`` for outputs ``y`` (rows, K): one-hot rows of y's
    shape by argmax, class indices (any shape with one entry per row: (rows,), a language
    model's (N, T)) flattened."""
    t = np.asarray(t)
    if t.shape == np.shape(y) and t.ndim > 1 and t.shape[-1] > 1:
        return t.argmax(-1)
    return t.reshape(-1).astype(np.int64)


class MetricError(ValueError):
    """A metric that cannot measure this model's outputs (one line naming both)."""


class Metric:
    name = None

    def __call__(self, y, t):
        raise NotImplementedError

    def check(self, out_shape):
        """Raise :class:`MetricError` when this metric cannot measure outputs of shape
        ``out_shape`` (one example: (..., K)); run before any evaluation or training."""

    def get_description(self):
        return {"type": type(self).__name__, "config": {}}


class Misclassification(Metric):
    """1 where argmax(y) is not the target class, else 0."""

    name = "misclassification"

    def __call__(self, y, t):
        return (np.asarray(y).argmax(-1) != _labels(t, y)).astype(np.float64)


class Accuracy(Metric):
    """1 where argmax(y) is the target class, else 0."""

    name = "accuracy"

    def __call__(self, y, t):
        return (np.asarray(y).argmax(-1) == _labels(t, y)).astype(np.float64)


class TopKMisclassification(Metric):
    """1 where the target class is not among the k largest outputs."""

    def __init__(self, k=5):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise MetricError(f"TopKMisclassification: k must be an integer >= 1, got {k!r}")
        self.k = int(k)
        self.name = f"top{self.k}_misclassification"

    def check(self, out_shape):
        classes = out_shape[-1] if out_shape else 1
        if self.k > classes:
            raise MetricError(f"TopKMisclassification: k={self.k} but the model has {classes} "
                              f"classes (every class would be in the top {self.k}, so the "
                              f"value would be 0): expected 1 <= k <= {classes}")

    def __call__(self, y, t):
        y = np.asarray(y)
        labels = _labels(t, y)
        target_score = np.take_along_axis(y, labels[:, None], axis=-1)
        better = (y > target_score).sum(-1)
        return (better >= self.k).astype(np.float64)

    def get_description(self):
        return {"type": "TopKMisclassification", "config": {"k": self.k}}


class LogLoss(Metric):
    """-log y[target] (natural log, clipped at 1e-12)."""

    name = "logloss"

    def __call__(self, y, t):
        y = np.asarray(y, dtype=np.float64)
        labels = _labels(t, y)
        return -np.log(np.maximum(np.take_along_axis(y, labels[:, None], axis=-1)[:, 0], 1e-12))


class MeanSquaredError(Metric):
    """Mean over each row's features of (y - t)^2: a reconstruction error (autoencoders)."""

    name = "mse"

    def __call__(self, y, t):
        d = np.asarray(y, dtype=np.float64) - np.asarray(t, dtype=np.float64)
        return np.square(d.reshape(len(d), -1)).mean(axis=1)
