"""Vectorized numpy convolution on NHWC tensors (the reference of ``Backend.fprop_conv``,
``bprop_conv``, ``update_conv``).

Convolution gathers patches into a preallocated (N*P*Q, R*S*C) matrix with one strided copy per
filter tap (R*S copies, never a loop over examples or pixels) and runs one GEMM; the data
gradient is the transposed GEMM followed by a scatter-add per tap.  Work arrays live in the
plan's buffer table (:meth:`~neonlite.backends.plans.Plan.buffer`), made on first use.
"""
import numpy as np


def tap_slices(plan, r, s):
    """Index of the (N, P, Q, C) window that filter tap (r, s) reads from the padded input
    (pooling plans have no dilation)."""
    h0, w0 = r * getattr(plan, "dil_h", 1), s * getattr(plan, "dil_w", 1)
    return (slice(None), slice(h0, h0 + plan.str_h * (plan.P - 1) + 1, plan.str_h),
            slice(w0, w0 + plan.str_w * (plan.Q - 1) + 1, plan.str_w), slice(None))


def padded(plan, x, fill):
    """``x`` (N, H, W, C) copied into the plan's padded buffer (borders hold ``fill``)."""
    if plan.pad_h == 0 and plan.pad_w == 0:
        return x
    shape = (x.shape[0], plan.H + 2 * plan.pad_h, plan.W + 2 * plan.pad_w, plan.C)
    buf = plan.buffer(f"padded input {fill}", shape, x.dtype, fill=fill)
    buf[:, plan.pad_h:plan.pad_h + plan.H, plan.pad_w:plan.pad_w + plan.W, :] = x
    return buf


def padded_gradient(plan, n, dtype):
    """The plan's zeroed (n, H + 2 pad_h, W + 2 pad_w, C) buffer for a data gradient."""
    shape = (n, plan.H + 2 * plan.pad_h, plan.W + 2 * plan.pad_w, plan.C)
    buf = plan.buffer("padded gradient", shape, dtype)
    buf.fill(0)
    return buf


def interior(plan, padded_array):
    """The unpadded (N, H, W, C) view of a padded array."""
    return padded_array[:, plan.pad_h:plan.pad_h + plan.H, plan.pad_w:plan.pad_w + plan.W, :]


def conv_patches(plan, x):
    """(N*P*Q, R*S*C) patch matrix of ``x`` (N, H, W, C), in a buffer on the plan."""
    N = x.shape[0]
    if plan.pointwise:
        patches = x.reshape(N * plan.P * plan.Q, plan.C)
    else:
        xp = padded(plan, x, 0)
        buf = plan.buffer("patches", (N, plan.P, plan.Q, plan.R, plan.S, plan.C), x.dtype)
        for r in range(plan.R):
            for s in range(plan.S):
                buf[:, :, :, r, s, :] = xp[tap_slices(plan, r, s)]
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
    if plan.pointwise:
        result = e2 @ f.reshape(plan.C, plan.K).T
        accumulate(grad_x.reshape(-1, plan.C), result, beta)
        return
    dpatches = plan.buffer("patch gradient", (N, plan.P, plan.Q, plan.R, plan.S, plan.C),
                           e.dtype)
    np.matmul(e2, f.reshape(-1, plan.K).T, out=dpatches.reshape(N * plan.P * plan.Q, -1))
    dxp = padded_gradient(plan, N, e.dtype)
    for r in range(plan.R):
        for s in range(plan.S):
            dxp[tap_slices(plan, r, s)] += dpatches[:, :, :, r, s, :]
    accumulate(grad_x, interior(plan, dxp), beta)


def update_conv(plan, x, e, grad_f, beta=0.0):
    """grad_f (R, S, C, K) = beta * grad_f + patches(x)^T @ e."""
    patches = conv_patches(plan, x)
    result = patches.T @ e.reshape(-1, plan.K)
    accumulate(grad_f.reshape(-1, plan.K), result, beta)


def accumulate(out, value, beta):
    """out = beta * out + value (out's dtype; beta 0 overwrites, NaN included)."""
    if beta == 0.0:
        np.copyto(out, value, casting="unsafe")
    elif beta == 1.0:
        out += value
    else:
        out *= beta
        out += value
