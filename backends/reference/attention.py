"""The numpy reference of the fused attention op (``Backend.attention`` /
``Backend.attention_bprop``).  The two small descriptions it takes, the dropout stream and a
block layout, are ``backends/shared/attention_tables.py``'s.

The reference is the plain unfused computation, one (batch*head) slice at a time: scores
(Tq, Tk), masks, softmax, dropout, products.  It keeps only the log-sum-exp per query row for
the backward pass, as the kernels do, and regenerates the dropout mask there.
"""
import numpy as np

from ..philox import example_uniforms


class _TokenMajor:
    """Slice b = n*heads + h of a token-major (N, T, heads, d) array as [b]: the (T, d) view
    x[n, :, h] (read and assigned through)."""

    def __init__(self, x, heads):
        self.x, self.heads = x, heads

    def __getitem__(self, b):
        return self.x[b // self.heads, :, b % self.heads]

    def __setitem__(self, b, value):
        self.x[b // self.heads, :, b % self.heads] = value


def head_slices(x, heads):
    """x as slices [b] (T, d): head-major (B, T, d) as it is, token-major (N, T, heads, d)
    (e.g. the (N, T, H, dh) view of a projection's columns) through :class:`_TokenMajor`."""
    return x if np.ndim(x) == 3 else _TokenMajor(x, heads)


def hidden_keys(B, heads, Tq, Tk, causal, key_mask, blocks, b):
    """The (Tq, Tk) boolean mask of keys hidden from the queries of slice b (or None)."""
    hidden = None
    if causal:
        hidden = ~np.tri(Tq, Tk, Tk - Tq, dtype=bool)
    if key_mask is not None:
        pad = np.broadcast_to(np.asarray(key_mask)[b // heads] == 0, (Tq, Tk))
        hidden = pad if hidden is None else hidden | pad
    if blocks is not None:
        outside = ~blocks.visible(heads, Tq, Tk)[b % heads]
        hidden = outside if hidden is None else hidden | outside
    return hidden


def dropout_scale(dropout, heads, Tq, Tk, b, dtype):
    """The (Tq, Tk) dropout factors (0 or 1/keep, rounded to ``dtype``) of slice b."""
    n, h = divmod(b, heads)
    per = heads * Tq * Tk
    elements = h * Tq * Tk + np.arange(Tq * Tk, dtype=np.int64)
    u = example_uniforms(dropout.key, dropout.step, dropout.stream, dropout.first + n, per,
                         elements)
    keep = np.asarray(1.0 / dropout.keep, dtype=dtype)
    return np.where(u < np.float32(dropout.keep), keep, 0).astype(dtype).reshape(Tq, Tk)


def _probabilities(q, k, scale, hidden, lse=None):
    """(P, lse) of one slice: P = softmax(scale q k^T) with hidden keys 0 (rows with nothing
    visible are 0 and get lse -inf); given ``lse``, P = exp(s - lse) instead."""
    s = (q @ k.T) * scale
    if hidden is not None:
        s = np.where(hidden, -np.inf, s)
    if lse is None:
        peak = s.max(axis=1, keepdims=True)
        safe = np.where(np.isneginf(peak), 0.0, peak)
        total = np.exp(s - safe).sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            lse = (safe + np.log(total))[:, 0]
        lse = np.where(total[:, 0] == 0, -np.inf, lse)
    rows = np.isneginf(lse)[:, None]
    p = np.where(rows, 0.0, np.exp(s - np.where(rows, 0.0, lse[:, None])))
    return p.astype(q.dtype), lse


def attention(q, k, v, out, lse, scale, causal=False, key_mask=None, dropout=None,
              blocks=None, heads=1):
    """out (B, Tq, dv) = dropout(softmax(scale q k^T + masks)) v, lse (B, Tq) the log of each
    row's softmax denominator (including the scale; -inf where every key is hidden).
    q (B, Tq, dk), k (B, Tk, dk), v (B, Tk, dv): B = N*heads slices, slice b of example
    b // heads; each of q, k, v, out may instead be token-major (N, T, heads, d).  See
    ``Backend.attention`` for the masks."""
    B, Tq = lse.shape
    Tk = k.shape[1]
    q, k, v, out = (head_slices(x, heads) for x in (q, k, v, out))
    for b in range(B):
        hidden = hidden_keys(B, heads, Tq, Tk, causal, key_mask, blocks, b)
        p, row_lse = _probabilities(q[b], k[b], scale, hidden)
        if dropout is not None:
            p = p * dropout_scale(dropout, heads, Tq, Tk, b, q.dtype)
        out[b] = p @ v[b]
        lse[b] = row_lse


def attention_bprop(q, k, v, out, lse, dout, dq, dk, dv, scale, causal=False, key_mask=None,
                    dropout=None, blocks=None, heads=1):
    """dq, dk, dv of ``attention`` for the output gradient dout (B, Tq, dv), recomputing the
    probabilities from ``lse`` and using D = rowsum(dout * out)."""
    B, Tq = lse.shape
    Tk = k.shape[1]
    q, k, v, out, dout, dq, dk, dv = (head_slices(x, heads)
                                      for x in (q, k, v, out, dout, dq, dk, dv))
    for b in range(B):
        hidden = hidden_keys(B, heads, Tq, Tk, causal, key_mask, blocks, b)
        p, _ = _probabilities(q[b], k[b], scale, hidden, lse[b])
        z = dropout_scale(dropout, heads, Tq, Tk, b, q.dtype) if dropout is not None else 1
        dv[b] = (p * z).T @ dout[b]
        dp = (dout[b] @ v[b].T) * z
        d_row = np.einsum("ij,ij->i", dout[b], out[b])[:, None]
        ds = p * (dp - d_row) * scale
        dq[b] = ds @ k[b]
        dk[b] = ds.T @ q[b]
