"""A layout compiled to the lookup tables that the reference ops and the kernels walk.

The stored blocks of a layout (heads, rows, cols) are numbered k = 0 .. nnz-1 in the row-major
order of ``np.nonzero(layout)`` (head, then row, then column).  Block k of a block-sparse
weight W is ``W[k]`` (bs, bs); block k of a block-sparse attention matrix of one example is
``S[n, k]`` (bs, bs).  A 2-D layout is one head.

:func:`compile_layout` memoizes on the layout's bytes and shape, so identical layouts (every
layer of a model with the same pattern) share one :class:`Tables`.
"""
import functools

import numpy as np

from .layouts import as_layout


class Tables:
    """The lookup tables of one layout (every array int32, read-only).

    Attributes (H heads, R rows and C columns of blocks, nnz stored blocks):
        layout: the (H, R, C) uint8 layout itself.
        heads, rows, cols, nnz (int): H, R, C and the number of stored blocks.
        head, row, col (nnz,): the head, block row and block column of block k.
        row_ptr (H*R + 1,): the blocks of row r of head h are k = row_ptr[h*R + r] ..
            row_ptr[h*R + r + 1] - 1 (consecutive, since blocks are numbered row-major), in
            increasing column order.  A row without blocks has row_ptr[i] == row_ptr[i + 1].
        row_k (nnz,): k itself (``row_k[e] == e``), so row and column walks look alike.
        row_other (nnz,): the column of entry e of a row walk (``col[row_k[e]]``).
        col_ptr (H*C + 1,): entries col_ptr[h*C + c] .. col_ptr[h*C + c + 1] - 1 of
            ``col_k``/``col_other`` are the blocks of column c of head h, in increasing row
            order (the transposed layout's row walk: bprop of the linear op, and the key side
            of attention).
        col_k (nnz,): the block number k of entry e of a column walk.
        col_other (nnz,): the block row of that block (``row[col_k[e]]``).
        row_count (H*R,), col_count (H*C,): blocks per row and per column.
    """

    def __init__(self, layout):
        layout = as_layout(layout)
        layout3 = layout.reshape((1,) + layout.shape) if layout.ndim == 2 else layout
        H, R, C = layout3.shape
        self.layout = layout3
        self.heads, self.rows, self.cols = H, R, C
        head, row, col = (a.astype(np.int32) for a in np.nonzero(layout3))
        self.nnz = int(head.size)
        self.head, self.row, self.col = head, row, col
        row_id = head * R + row
        self.row_count = np.bincount(row_id, minlength=H * R).astype(np.int32)
        self.row_ptr = _pointers(self.row_count)
        self.row_k = np.arange(self.nnz, dtype=np.int32)
        self.row_other = col.copy()
        col_id = head * C + col
        order = np.lexsort((row, col_id)).astype(np.int32)
        self.col_count = np.bincount(col_id, minlength=H * C).astype(np.int32)
        self.col_ptr = _pointers(self.col_count)
        self.col_k = order
        self.col_other = row[order].astype(np.int32)
        for arr in (self.layout, self.head, self.row, self.col, self.row_count, self.row_ptr,
                    self.row_k, self.row_other, self.col_count, self.col_ptr, self.col_k,
                    self.col_other):
            arr.setflags(write=False)

    @property
    def density(self):
        return self.nnz / float(self.heads * self.rows * self.cols)

    def __repr__(self):
        return (f"Tables(heads={self.heads}, rows={self.rows}, cols={self.cols}, "
                f"nnz={self.nnz})")


def _pointers(counts):
    ptr = np.zeros(counts.size + 1, dtype=np.int32)
    np.cumsum(counts, out=ptr[1:])
    return ptr


@functools.lru_cache(maxsize=64)
def _compiled(key, shape):
    return Tables(np.frombuffer(key, dtype=np.uint8).reshape(shape))


def compile_layout(layout):
    """The (memoized) :class:`Tables` of ``layout`` (a 2-D or 3-D 0/1 array)."""
    layout = as_layout(layout)
    return _compiled(layout.tobytes(), layout.shape)
