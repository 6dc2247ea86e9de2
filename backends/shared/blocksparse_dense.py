"""Block-sparse weights as a dense matrix, for the block-sparse layers (``dense_weight``) and
the tests that compare the block-sparse reference with dense products."""
import numpy as np


def _blk(i, bs):
    return slice(int(i) * bs, (int(i) + 1) * bs)


def blocks_to_dense(t, w, bs):
    """The dense (H, R*bs, C*bs) matrix (squeezed to 2-D for one head) of blocks ``w``
    (nnz, ...) with block k at (head[k], row[k], col[k]) and zeros elsewhere."""
    out = np.zeros((t.heads, t.rows * bs, t.cols * bs) + w.shape[3:], dtype=w.dtype)
    for k in range(t.nnz):
        out[t.head[k], _blk(t.row[k], bs), _blk(t.col[k], bs)] = w[k]
    return out[0] if t.heads == 1 else out
