"""Vectorized numpy GELU with an optional bias, and its gradient with the bias gradient (the
reference of ``Backend.gelu`` and ``gelu_bprop``).  Rows x (..., D), bias and dbias (D,);
``approximate``: ``"none"`` (x * Phi(x), the erf form) or ``"tanh"``."""
import math

import numpy as np

from .optree import erf

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_K = math.sqrt(2.0 / math.pi)


def _values_and_slopes(h, approximate):
    """(gelu(h), gelu'(h)) in float64."""
    h = h.astype(np.float64)
    if approximate == "tanh":
        t = np.tanh(_TANH_K * (h + 0.044715 * h ** 3))
        slope = 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * _TANH_K * (1 + 3 * 0.044715 * h * h)
        return 0.5 * h * (1 + t), slope
    cdf = 0.5 * (1 + erf(h * _SQRT_HALF))
    return h * cdf, cdf + h * np.exp(-0.5 * h * h) * _INV_SQRT_2PI


def gelu(x, out, bias, pre, approximate):
    """pre = x + bias (x without a bias; None: not kept; may be x), out = gelu(x + bias)."""
    h = x if bias is None else x + bias
    if pre is not None:
        np.copyto(pre, h)
    np.copyto(out, _values_and_slopes(h, approximate)[0], casting="unsafe")


def gelu_bprop(x, dy, dx, dbias, y, approximate):
    """dx = dy * gelu'(x) (x the pre-activation; dx may be dy); dbias (D,) += the sums of dx
    over every axis but the last; ``y`` (the forward output) is not needed here."""
    g = dy * _values_and_slopes(x, approximate)[1]
    if dbias is not None:
        dbias += g.reshape(-1, dbias.shape[-1]).sum(axis=0).astype(dbias.dtype)
    np.copyto(dx, g, casting="unsafe")
