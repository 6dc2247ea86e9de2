"""Vectorized numpy max and average pooling on NHWC tensors (the reference of
``Backend.fprop_pool`` and ``bprop_pool``): each walks the window's taps, with the strided
windows of :func:`~neonlite.backends.reference.conv.tap_slices`; padded positions never win a
max and are not counted in an average.  Work arrays live in the plan's buffer table."""
import numpy as np

from .conv import accumulate, interior, padded, padded_gradient, tap_slices


def fprop_pool(plan, x, o):
    """o (N, P, Q, C) = max or average over each window of x (N, H, W, C)."""
    if plan.op == "max":
        xp = padded(plan, x, -np.inf)
        argmax = plan.buffer("argmax", o.shape, np.int16)
        argmax.fill(0)
        o[...] = xp[tap_slices(plan, 0, 0)]
        for t in range(1, plan.R * plan.S):
            window = xp[tap_slices(plan, t // plan.S, t % plan.S)]
            better = window > o
            np.copyto(o, window, where=better)
            argmax[better] = t
    else:
        xp = padded(plan, x, 0)
        o[...] = 0
        for r in range(plan.R):
            for s in range(plan.S):
                o += xp[tap_slices(plan, r, s)]
        o *= _inverse_counts(plan, o.dtype)


def bprop_pool(plan, e, grad_x, beta=0.0):
    """grad_x (N, H, W, C) = beta * grad_x + e (N, P, Q, C) routed back through the windows."""
    N = e.shape[0]
    dxp = padded_gradient(plan, N, e.dtype)
    if plan.op == "max":
        argmax = plan.buffer("argmax", e.shape, np.int16)
        for t in range(plan.R * plan.S):
            dxp[tap_slices(plan, t // plan.S, t % plan.S)] += e * (argmax == t)
    else:
        scaled = e * _inverse_counts(plan, e.dtype)
        for r in range(plan.R):
            for s in range(plan.S):
                dxp[tap_slices(plan, r, s)] += scaled
    accumulate(grad_x, interior(plan, dxp), beta)


def _inverse_counts(plan, dtype):
    """(1, P, Q, 1): 1 / number of non-padding inputs in each averaging window."""
    def count(inv):
        hs = np.arange(plan.P) * plan.str_h - plan.pad_h
        ws = np.arange(plan.Q) * plan.str_w - plan.pad_w
        rows = np.minimum(hs + plan.R, plan.H) - np.maximum(hs, 0)
        cols = np.minimum(ws + plan.S, plan.W) - np.maximum(ws, 0)
        inv[0, :, :, 0] = 1.0 / np.outer(rows, cols)

    return plan.buffer("inverse counts", (1, plan.P, plan.Q, 1), dtype, make=count)
