"""What the attention layers, both backends and the attention reference share: the dropout
stream on the attention probabilities (:class:`AttentionDropout`), a block layout
(:class:`AttentionBlocks`) and the tables of the tiles a block layout visits
(:func:`visit_tables`)."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AttentionDropout:
    """Dropout on the attention probabilities, drawn from the per-example Philox stream of
    :func:`philox.example_masks` as if the whole mask (N, H, Tq, Tk) were drawn at once with
    ``(key, step, stream)`` for the global examples ``first ..``: probability (b, i, j) of slice
    b = n*H + h keeps (scaled by 1/keep) when the uniform of element h*Tq*Tk + i*Tk + j of
    example first + n is below float32(keep).  So the masks are those the unfused layer drew
    with ``KeyedDropoutMixin.draw_dropout_mask``, bit for bit."""

    keep: float
    key: int
    step: int
    stream: int
    first: int = 0


class AttentionBlocks:
    """A block layout for attention: ``layout`` 0/1 (Hl, ceil(Tq/bq), ceil(Tk/bk)) (Hl = 1:
    shared by every head, else one per head), query blocks of ``bq`` rows and key blocks of
    ``bk`` keys.  Query block r of head h visits key block c only where layout[h, r, c] is 1;
    keys of blocks it does not visit are hidden.  Backends keep their tables of it in
    ``cache`` (made on first use)."""

    def __init__(self, layout, bq, bk):
        layout = np.asarray(layout)
        if layout.ndim == 2:
            layout = layout[None]
        if layout.ndim != 3:
            raise ValueError(f"attention blocks: the layout must be (Hl, Tq/bq, Tk/bk), got "
                             f"shape {layout.shape}")
        self.layout = np.ascontiguousarray(layout != 0)
        self.bq, self.bk = int(bq), int(bk)
        self.cache = {}

    def visible(self, heads, Tq, Tk):
        """The (heads, Tq, Tk) boolean key visibility the layout gives."""
        rows = np.arange(Tq) // self.bq
        cols = np.arange(Tk) // self.bk
        grid = self.layout[:, rows][:, :, cols]
        return np.broadcast_to(grid, (heads, Tq, Tk)) if grid.shape[0] == 1 else grid


def visit_tables(layout, Tq, Tk, bq, bk, causal):
    """int32 tables of the tiles to visit for a 0/1 ``layout`` (Hl, nqb, nkb): ``row_ptr``
    (Hl*nqb + 1) / ``cols`` (the key blocks of each query block, in order) and ``col_ptr``
    (Hl*nkb + 1) / ``rows`` (the query blocks of each key block, in order).  With ``causal``,
    blocks wholly above the diagonal (key > query + Tk - Tq for every pair) are left out."""
    layout = np.array(layout, dtype=bool)
    Hl, nqb, nkb = layout.shape
    if causal:
        last_query = np.minimum((np.arange(nqb) + 1) * bq, Tq) - 1
        layout &= (np.arange(nkb) * bk)[None, None, :] <= (last_query + Tk - Tq)[None, :, None]
    h, r, c = np.nonzero(layout)
    row_ptr = np.concatenate([[0], np.cumsum(layout.reshape(Hl * nqb, nkb).sum(axis=1))])
    order = np.lexsort((r, c, h))  # by head, key block, query block
    col_ptr = np.concatenate([[0], np.cumsum(layout.transpose(0, 2, 1)
                                             .reshape(Hl * nkb, nqb).sum(axis=1))])
    as32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    return as32(row_ptr), as32(c), as32(col_ptr), as32(r[order])
