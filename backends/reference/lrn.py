"""Local response normalization across channels on numpy rows (M, C), the reference of the C
and CUDA kernels (``kernels/cpu/lrn.c``, ``kernels/cuda/lrn.cu``).

    scale[c] = k + alpha / depth * sum_{c' = c - depth//2}^{c + (depth-1)//2} x[c']^2
    y[c] = x[c] * scale[c]^-beta

(channels outside [0, C) count as 0; PyTorch's ``LocalResponseNorm``).  The gradient:

    dx[i] = dy[i] scale[i]^-beta
            - 2 alpha beta / depth * x[i] * sum_{j: i in window(j)} dy[j] x[j] scale[j]^(-beta-1)
"""
import numpy as np


def _window_sums(v, before, after):
    """sum over v[..., c - before .. c + after] (clipped to the row) for every c."""
    C = v.shape[-1]
    padded = np.concatenate([np.zeros(v.shape[:-1] + (before + 1,), v.dtype), v,
                             np.zeros(v.shape[:-1] + (after,), v.dtype)], axis=-1)
    cums = np.cumsum(padded, axis=-1)
    return cums[..., before + after + 1:before + after + 1 + C] - cums[..., :C]


def lrn_fprop(x, y, scale, depth, alpha, beta, k):
    s = k + (alpha / depth) * _window_sums(x * x, depth // 2, (depth - 1) // 2)
    scale[...] = s
    y[...] = x * s ** -beta


def lrn_bprop(x, scale, dy, dx, depth, alpha, beta):
    t = dy * x * scale ** (-beta - 1)
    back = _window_sums(t, (depth - 1) // 2, depth // 2)
    dx[...] = dy * scale ** -beta - (2.0 * alpha * beta / depth) * x * back
