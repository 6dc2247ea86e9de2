"""Vectorized numpy softmax, fused softmax-cross-entropy and the masked attention softmax
(the reference of ``Backend.softmax``, ``softmax_cross_entropy``, ``masked_softmax`` and
``masked_softmax_bprop``).  Each works over the last axis of (M, K) or (B, Tq, Tk).  Class
indices are checked by ``backends/shared/class_indices.py``."""
import numpy as np

from ..shared.class_indices import check_class_indices


def softmax(x, out, axis=-1):
    np.subtract(x, x.max(axis=axis, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=axis, keepdims=True)


def softmax_cross_entropy(logits, targets, probs, grad, scale):
    """probs = softmax(logits) (M, K); grad = scale * (probs - targets); returns the summed
    loss -sum targets * log(probs), summed per row first.  ``targets`` is (M, K) one-hot or
    soft, or (M,) integer class indices (then the same values as with the one-hot targets,
    bit for bit)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logsum = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    logp = shifted - logsum
    np.exp(logp, out=probs)
    if targets.dtype.kind in "iu":
        check_class_indices(targets, logits.shape[-1])
        rows = np.arange(targets.shape[0])
        loss = -float(np.sum(logp[rows, targets].astype(np.float64)))
        np.multiply(probs, scale, out=grad)
        grad[rows, targets] = (probs[rows, targets] - 1) * grad.dtype.type(scale)
        return loss
    loss = -float(np.sum(np.sum(targets * logp, axis=-1, dtype=np.float64)))
    np.subtract(probs, targets, out=grad)
    grad *= scale
    return loss


def masked_softmax(x, out, scale, causal, key_mask):
    """Softmax over the last axis of (B, Tq, Tk) with causal and key-padding masks (see
    ``Backend.masked_softmax``); hidden entries become -inf before the max, so they are 0."""
    B, Tq, Tk = x.shape
    if scale != 1.0:
        np.multiply(x, scale, out=out)
    elif out is not x:
        np.copyto(out, x)
    masked = causal or key_mask is not None
    if causal:
        np.copyto(out, -np.inf, where=~np.tri(Tq, Tk, Tk - Tq, dtype=bool))
    if key_mask is not None:
        n = key_mask.shape[0]
        grouped = out.reshape(n, B // n, Tq, Tk)
        np.copyto(grouped, -np.inf, where=(key_mask == 0)[:, None, None, :])
    peak = out.max(axis=-1, keepdims=True)
    if masked:
        peak[np.isneginf(peak)] = 0.0
    out -= peak
    np.exp(out, out=out)
    total = out.sum(axis=-1, keepdims=True)
    if masked:
        total[total == 0] = 1.0
    np.reciprocal(total, out=total)
    out *= total


def masked_softmax_bprop(y, dy, dx, scale):
    dot = np.einsum("bij,bij->bi", dy, y)[..., None]
    np.subtract(dy, dot, out=dx)
    dx *= y
    if scale != 1.0:
        dx *= scale
