"""Vectorized numpy convolution and pooling on NHWC tensors.

Convolution gathers patches into a preallocated (N*P*Q, R*S*C) matrix with one strided copy per
filter tap (R*S copies, never a loop over examples or pixels) and runs one GEMM; the data
gradient is the transposed GEMM followed by a scatter-add per tap.  Pooling walks the same taps.
All work buffers live on the plan and are made on its first use.
"""
import numpy as np


def _tap_slices(plan, r, s):
    """Index of the (N, P, Q, C) window that filter tap (r, s) reads from the padded input."""
    h0, w0 = r * getattr(plan, "dil_h", 1), s * getattr(plan, "dil_w", 1)
    return (slice(None), slice(h0, h0 + plan.str_h * (plan.P - 1) + 1, plan.str_h),
            slice(w0, w0 + plan.str_w * (plan.Q - 1) + 1, plan.str_w), slice(None))


def _padded(plan, x, fill, attr):
    """``x`` (N, H, W, C) copied into the plan's padded buffer (borders hold ``fill``)."""
    if plan.pad_h == 0 and plan.pad_w == 0:
        return x
    buf = getattr(plan, attr, None)
    shape = (x.shape[0], plan.H + 2 * plan.pad_h, plan.W + 2 * plan.pad_w, plan.C)
    if buf is None or buf.shape != shape or buf.dtype != x.dtype:
        buf = np.full(shape, fill, dtype=x.dtype)
        setattr(plan, attr, buf)
    buf[:, plan.pad_h:plan.pad_h + plan.H, plan.pad_w:plan.pad_w + plan.W, :] = x
    return buf


def _buffer(plan, attr, shape, dtype, zero=False):
    buf = getattr(plan, attr, None)
    if buf is None or buf.shape != shape or buf.dtype != dtype:
        buf = np.empty(shape, dtype=dtype)
        setattr(plan, attr, buf)
    if zero:
        buf.fill(0)
    return buf


def _is_pointwise(plan):
    return (plan.R == plan.S == 1 and plan.str_h == plan.str_w == 1
            and plan.pad_h == plan.pad_w == 0)


def conv_patches(plan, x):
    """(N*P*Q, R*S*C) patch matrix of ``x`` (N, H, W, C), in a buffer on the plan."""
    N = x.shape[0]
    if _is_pointwise(plan):
        patches = x.reshape(N * plan.P * plan.Q, plan.C)
    else:
        xp = _padded(plan, x, 0, "_xpad")
        buf = _buffer(plan, "_patches", (N, plan.P, plan.Q, plan.R, plan.S, plan.C), x.dtype)
        for r in range(plan.R):
            for s in range(plan.S):
                buf[:, :, :, r, s, :] = xp[_tap_slices(plan, r, s)]
        patches = buf.reshape(N * plan.P * plan.Q, plan.R * plan.S * plan.C)
    return patches


def fprop_conv(plan, x, f, o, bias=None, relu=False):
    """o (N, P, Q, K) = conv(x (N, H, W, C), f (R, S, C, K)) (+ bias (K,), then max(o, 0)
    when ``relu``)."""
    patches = conv_patches(plan, x)
    np.matmul(patches, f.reshape(-1, plan.K), out=o.reshape(-1, plan.K))
    if bias is not None:
        o += bias
    if relu:
        np.maximum(o, 0, out=o)


def bprop_conv(plan, f, e, grad_x, beta=0.0):
    """grad_x (N, H, W, C) = beta * grad_x + (data gradient of e (N, P, Q, K) through f)."""
    N = e.shape[0]
    e2 = e.reshape(-1, plan.K)
    if _is_pointwise(plan):
        result = e2 @ f.reshape(plan.C, plan.K).T
        _accumulate(grad_x.reshape(-1, plan.C), result, beta)
        return
    dpatches = _buffer(plan, "_dpatches", (N, plan.P, plan.Q, plan.R, plan.S, plan.C), e.dtype)
    np.matmul(e2, f.reshape(-1, plan.K).T, out=dpatches.reshape(N * plan.P * plan.Q, -1))
    padded_shape = (N, plan.H + 2 * plan.pad_h, plan.W + 2 * plan.pad_w, plan.C)
    dxp = _buffer(plan, "_dxpad", padded_shape, e.dtype, zero=True)
    for r in range(plan.R):
        for s in range(plan.S):
            dxp[_tap_slices(plan, r, s)] += dpatches[:, :, :, r, s, :]
    interior = dxp[:, plan.pad_h:plan.pad_h + plan.H, plan.pad_w:plan.pad_w + plan.W, :]
    _accumulate(grad_x, interior, beta)


def update_conv(plan, x, e, grad_f, beta=0.0):
    """grad_f (R, S, C, K) = beta * grad_f + patches(x)^T @ e."""
    patches = conv_patches(plan, x)
    result = patches.T @ e.reshape(-1, plan.K)
    _accumulate(grad_f.reshape(-1, plan.K), result, beta)


def _accumulate(out, value, beta):
    if beta == 0.0:
        np.copyto(out, value, casting="unsafe")
    elif beta == 1.0:
        out += value
    else:
        out *= beta
        out += value


def fprop_pool(plan, x, o):
    """o (N, P, Q, C) = max or average over each window of x (N, H, W, C)."""
    if plan.op == "max":
        xp = _padded(plan, x, -np.inf, "_xpad")
        argmax = _buffer(plan, "_argmax", o.shape, np.int16)
        argmax.fill(0)
        o[...] = xp[_tap_slices(plan, 0, 0)]
        for t in range(1, plan.R * plan.S):
            window = xp[_tap_slices(plan, t // plan.S, t % plan.S)]
            better = window > o
            np.copyto(o, window, where=better)
            argmax[better] = t
    else:
        xp = _padded(plan, x, 0, "_xpad")
        o[...] = 0
        for r in range(plan.R):
            for s in range(plan.S):
                o += xp[_tap_slices(plan, r, s)]
        o *= _inverse_counts(plan, o.dtype)


def bprop_pool(plan, e, grad_x, beta=0.0):
    """grad_x (N, H, W, C) = beta * grad_x + e (N, P, Q, C) routed back through the windows."""
    N = e.shape[0]
    padded_shape = (N, plan.H + 2 * plan.pad_h, plan.W + 2 * plan.pad_w, plan.C)
    dxp = _buffer(plan, "_dxpad", padded_shape, e.dtype, zero=True)
    if plan.op == "max":
        for t in range(plan.R * plan.S):
            dxp[_tap_slices(plan, t // plan.S, t % plan.S)] += e * (plan._argmax == t)
    else:
        scaled = e * _inverse_counts(plan, e.dtype)
        for r in range(plan.R):
            for s in range(plan.S):
                dxp[_tap_slices(plan, r, s)] += scaled
    interior = dxp[:, plan.pad_h:plan.pad_h + plan.H, plan.pad_w:plan.pad_w + plan.W, :]
    _accumulate(grad_x, interior, beta)


def _inverse_counts(plan, dtype):
    """(1, P, Q, 1): 1 / number of non-padding inputs in each averaging window."""
    inv = getattr(plan, "_inv_counts", None)
    if inv is None or inv.dtype != dtype:
        hs = np.arange(plan.P) * plan.str_h - plan.pad_h
        ws = np.arange(plan.Q) * plan.str_w - plan.pad_w
        rows = np.minimum(hs + plan.R, plan.H) - np.maximum(hs, 0)
        cols = np.minimum(ws + plan.S, plan.W) - np.maximum(ws, 0)
        inv = (1.0 / np.outer(rows, cols)).astype(dtype)[None, :, :, None]
        plan._inv_counts = inv
    return inv
