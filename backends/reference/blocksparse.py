"""numpy reference ops that walk the lookup tables of :mod:`.tables`.

They define what every backend computes; the tests compare the backends both with these and
with the dense computation masked by the layout (:func:`dense_mask`).  Block k of a weight is
``w[k]`` (bs, bs); block k of an attention matrix is ``s[:, k]`` (N, bs, bs).  Dense operands
are batch-first: the linear ops take rows (M, features), the attention ops head-major
sequences (N, H, T, d).  Arithmetic is in the operands' dtype.
"""
import numpy as np


def _blk(i, bs):
    return slice(i * bs, (i + 1) * bs)


def dense_mask(layout, bs):
    """The element mask of a layout: every block entry repeated bs x bs times
    ((rows, cols) -> (rows*bs, cols*bs); heads kept)."""
    layout = np.asarray(layout)
    return np.repeat(np.repeat(layout, bs, axis=-2), bs, axis=-1)


# ---- block-sparse weights: y = x @ W -----------------------------------------------------------
def linear_fprop(t, x, w, bs):
    """y (M, C*bs) = x (M, R*bs) @ W, walking the columns: y[:, c] = sum over the blocks k of
    column c of x[:, row[k]] @ w[k]."""
    y = np.zeros((x.shape[0], t.cols * bs), dtype=x.dtype)
    for c in range(t.cols):
        for e in range(t.col_ptr[c], t.col_ptr[c + 1]):
            y[:, _blk(c, bs)] += x[:, _blk(t.col_other[e], bs)] @ w[t.col_k[e]]
    return y


def linear_bprop(t, err, w, bs):
    """dx (M, R*bs) = err (M, C*bs) @ W^T, walking the rows (the transposed layout)."""
    dx = np.zeros((err.shape[0], t.rows * bs), dtype=err.dtype)
    for r in range(t.rows):
        for e in range(t.row_ptr[r], t.row_ptr[r + 1]):
            dx[:, _blk(r, bs)] += err[:, _blk(t.row_other[e], bs)] @ w[t.row_k[e]].T
    return dx


def linear_update(t, x, err, bs):
    """dw (nnz, bs, bs): dw[k] = x[:, row[k]]^T @ err[:, col[k]] (only the stored blocks)."""
    dw = np.empty((t.nnz, bs, bs), dtype=x.dtype)
    for k in range(t.nnz):
        dw[k] = x[:, _blk(t.row[k], bs)].T @ err[:, _blk(t.col[k], bs)]
    return dw


# ---- block-sparse attention ----------------------------------------------------------------------
def sdd(t, a, b, bs, alpha=1.0):
    """Sampled dense-dense product: s (N, nnz, bs, bs), s[:, k] = alpha * a[:, h, i] @
    b[:, h, j]^T for block k at (h, i, j); a (N, H, Tq, d), b (N, H, Tk, d)."""
    s = np.empty((a.shape[0], t.nnz, bs, bs), dtype=a.dtype)
    for k in range(t.nnz):
        h, i, j = t.head[k], t.row[k], t.col[k]
        s[:, k] = alpha * (a[:, h, _blk(i, bs)] @ np.swapaxes(b[:, h, _blk(j, bs)], -1, -2))
    return s


def causal_block_mask(t, k, bs):
    """(bs, bs) bool: True where query row r of block k may see key column c (key position
    <= query position + (Tk - Tq))."""
    off = (t.cols - t.rows) * bs
    r = np.arange(bs).reshape(bs, 1) + t.row[k] * bs + off
    c = np.arange(bs).reshape(1, bs) + t.col[k] * bs
    return c <= r


def softmax(t, s, bs, scale=1.0, causal=False):
    """p = softmax(scale * s) along each row of blocks (over the columns of every block of the
    row together); with ``causal`` the entries above the causal diagonal are hidden.  Hidden
    entries and rows without any visible entry are 0."""
    p = np.zeros_like(s)
    for row in range(t.heads * t.rows):
        lo, hi = t.row_ptr[row], t.row_ptr[row + 1]
        if lo == hi:
            continue
        x = scale * np.concatenate([s[:, k] for k in range(lo, hi)], axis=-1)
        visible = np.ones(x.shape[-2:], dtype=bool)
        if causal:
            visible = np.concatenate([causal_block_mask(t, k, bs) for k in range(lo, hi)],
                                     axis=-1)
        x = np.where(visible, x, -np.inf)
        top = np.max(x, axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0)
        e = np.where(visible, np.exp(x - top), 0)
        total = np.sum(e, axis=-1, keepdims=True)
        out = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
        for n, k in enumerate(range(lo, hi)):
            p[:, k] = out[..., n * bs:(n + 1) * bs]
    return p


def softmax_bprop(t, p, dp, scale=1.0):
    """ds = scale * p * (dp - sum over the row of dp * p) (the rows of :func:`softmax`)."""
    ds = np.empty_like(p)
    for row in range(t.heads * t.rows):
        lo, hi = t.row_ptr[row], t.row_ptr[row + 1]
        if lo == hi:
            continue
        dot = np.sum(dp[:, lo:hi] * p[:, lo:hi], axis=(1, 3), keepdims=True)
        ds[:, lo:hi] = scale * p[:, lo:hi] * (dp[:, lo:hi] - dot)
    return ds


def dsd(t, p, b, bs):
    """Sparse x dense over the rows: o (N, H, R*bs, d), o[:, h, i] = sum over the blocks k of
    row (h, i) of p[:, k] @ b[:, h, col[k]]; b (N, H, C*bs, d)."""
    n, d = b.shape[0], b.shape[-1]
    o = np.zeros((n, t.heads, t.rows * bs, d), dtype=b.dtype)
    for k in range(t.nnz):
        h, i, j = t.head[k], t.row[k], t.col[k]
        o[:, h, _blk(i, bs)] += p[:, k] @ b[:, h, _blk(j, bs)]
    return o


def dsd_t(t, p, b, bs):
    """Transposed sparse x dense over the columns: o (N, H, C*bs, d), o[:, h, j] = sum over the
    blocks k of column (h, j) of p[:, k]^T @ b[:, h, row[k]]; b (N, H, R*bs, d)."""
    n, d = b.shape[0], b.shape[-1]
    o = np.zeros((n, t.heads, t.cols * bs, d), dtype=b.dtype)
    for k in range(t.nnz):
        h, i, j = t.head[k], t.row[k], t.col[k]
        o[:, h, _blk(j, bs)] += np.swapaxes(p[:, k], -1, -2) @ b[:, h, _blk(i, bs)]
    return o
