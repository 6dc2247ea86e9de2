"""Vectorized numpy batch norm, layer norm and RMSNorm (the reference of
``Backend.batchnorm_*``, ``layernorm_*`` and ``rmsnorm_*``).

Shapes: batch norm normalizes (M, C) over axis 0 (an NHWC image batch is viewed as
(N*H*W, C)); layer norm and RMSNorm work over the last axis of (M, D).
"""
import numpy as np


def batchnorm_fprop(x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                    eps, momentum, inference, relu=False):
    """Batch norm of x (M, C) over its rows (see ``Backend.batchnorm_fprop``), then
    y = max(y, 0) with ``relu``."""
    if inference:
        np.copyto(mean, running_mean)
        np.copyto(invstd, 1.0 / np.sqrt(running_var + eps))
    else:
        m = x.shape[0]
        np.mean(x, axis=0, keepdims=True, out=mean)
        var = np.mean(np.square(x - mean), axis=0, keepdims=True)
        np.copyto(invstd, 1.0 / np.sqrt(var + eps))
        running_mean *= momentum
        running_mean += (1.0 - momentum) * mean
        running_var *= momentum
        running_var += (1.0 - momentum) * var * (m / max(m - 1, 1))
    batchnorm_apply(x, gamma, beta, y, xhat, mean, invstd, relu)


def batchnorm_moments(x):
    """(mean, m2): per-channel mean of x (M, C) and sum of squared deviations, float64 (C,)."""
    x = x.astype(np.float64)
    mean = x.mean(axis=0)
    return mean, np.square(x - mean).sum(axis=0)


def batchnorm_apply(x, gamma, beta, y, xhat, mean, invstd, relu=False):
    """xhat = (x - mean) * invstd, y = gamma * xhat + beta (then max(y, 0) with ``relu``)."""
    np.subtract(x, mean, out=xhat)
    xhat *= invstd
    np.multiply(xhat, gamma, out=y)
    y += beta
    if relu:
        np.maximum(y, 0, out=y)


def batchnorm_bprop(dy, xhat, invstd, gamma, dx, dgamma, dbeta, y=None, beta_acc=0.0):
    """dx (= beta_acc * dx +) the gradient, dgamma and dbeta accumulated into; ``y``, the
    output of a fprop with ReLU, masks dy by y > 0."""
    if y is not None:
        dy = dy * (y > 0)
    m = dy.shape[0]
    db = dy.sum(axis=0, keepdims=True)
    dg = np.sum(dy * xhat, axis=0, keepdims=True)
    dgamma += dg
    dbeta += db
    grad = (gamma * invstd / m) * (m * dy - db - xhat * dg)
    if beta_acc:
        dx *= beta_acc
        dx += grad
    else:
        np.copyto(dx, grad)


def layernorm_fprop(x, gamma, beta, y, xhat, invstd, residual=None, total=None, eps=1e-5):
    """Layer norm over the last axis of rows x (M, D) (see ``Backend.layernorm_fprop``);
    xhat None: not kept."""
    if residual is not None:
        x = np.add(x, residual, out=total)
    mean = x.mean(axis=-1, keepdims=True)
    xhat = np.subtract(x, mean, out=xhat)
    var = np.mean(np.square(xhat), axis=-1, keepdims=True)
    np.copyto(invstd, 1.0 / np.sqrt(var + eps))
    xhat *= invstd
    np.multiply(xhat, gamma, out=y)
    y += beta


def layernorm_bprop(dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None):
    dgamma += np.sum(dy * xhat, axis=0, keepdims=True)
    dbeta += dy.sum(axis=0, keepdims=True)
    g = dy * gamma
    np.copyto(dx, invstd * (g - g.mean(axis=-1, keepdims=True)
                            - xhat * np.mean(g * xhat, axis=-1, keepdims=True)))
    if residual is not None:
        np.add(residual, dx, out=dx)


def rmsnorm_fprop(x, gamma, y, xhat, rstd, residual, total, eps):
    """RMSNorm over the last axis of rows (M, D): rstd (M, 1) = 1 / sqrt(mean(x^2) + eps),
    xhat = x * rstd, y = gamma * xhat (no mean subtracted, no shift); with ``residual`` and
    ``total`` (M, D): total = x + residual, normalized in x's place.  xhat None: not kept."""
    if residual is not None:
        x = np.add(x, residual, out=total)
    np.copyto(rstd, 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps))
    h = x * rstd
    if xhat is not None:
        np.copyto(xhat, h)
    np.multiply(h, gamma, out=y)


def rmsnorm_bprop(dy, xhat, rstd, gamma, dx, dgamma, residual):
    """dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma (plus ``residual`` when given);
    dgamma += the sum over rows of dy * xhat."""
    dgamma += np.sum(dy * xhat, axis=0, keepdims=True)
    g = dy * gamma
    np.copyto(dx, rstd * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True)))
    if residual is not None:
        np.add(residual, dx, out=dx)
