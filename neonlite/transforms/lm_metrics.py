"""Language-model metrics on host arrays: y (rows, vocab) next-token probabilities and t
(rows, vocab) one-hot targets (or (rows,) token ids), one row per token.

Per-row values are averaged over every real token by ``Model.eval``; a metric with an
``aggregate(mean)`` method turns that mean into its final value (perplexity = exp(mean nats)).
"""
import math

import numpy as np

from .metric import Metric, _labels

_FLOOR = 1e-30


def token_nats(y, t):
    """-ln y[target] per row (float64; probabilities floored at 1e-30)."""
    y = np.asarray(y, dtype=np.float64)
    p = np.take_along_axis(y, _labels(t, y)[:, None], axis=-1)[:, 0]
    return -np.log(np.maximum(p, _FLOOR))


class NatsPerToken(Metric):
    """Cross-entropy in nats per token: -ln y[target] averaged over tokens."""

    name = "nats_per_token"

    def __call__(self, y, t):
        return token_nats(y, t)


class BitsPerCharacter(Metric):
    """Cross-entropy in bits per token (bits per character for a character model)."""

    name = "bits_per_character"

    def __call__(self, y, t):
        return token_nats(y, t) / math.log(2.0)


class Perplexity(Metric):
    """exp(mean nats per token): rows give nats, :meth:`aggregate` exponentiates the mean."""

    name = "perplexity"

    def __call__(self, y, t):
        return token_nats(y, t)

    def aggregate(self, mean):
        return math.exp(mean)
