"""Row gather and deterministic scatter-add on numpy arrays (embedding look-up and its
gradient): a table is (V, D), ids any shape S, rows S + (D,)."""
import numpy as np


def row_indices(ids, nrows):
    """``ids`` as an intp array, checked to be whole numbers in [0, nrows); an ``IndexError``
    names the first bad id and its position in ``ids``."""
    idx = ids.astype(np.intp)
    bad = (idx < 0) | (idx >= nrows)
    if ids.dtype.kind == "f":
        bad |= idx != ids
    if bad.any():
        where = np.unravel_index(int(np.argmax(bad)), ids.shape)
        where = tuple(int(i) for i in where)
        value = ids[where].item()
        value = int(value) if float(value).is_integer() else value
        raise IndexError(f"id {value} at position {where} of ids {ids.shape} is out of range: "
                         f"expected a whole number in [0, {nrows})")
    return idx


def take_rows(table, ids, out):
    idx = row_indices(ids, table.shape[0])
    np.take(table, idx.reshape(-1), axis=0, out=out.reshape(-1, table.shape[1]))


def scatter_add_rows(grad_table, ids, rows):
    """Sort-based segment sum: rows with equal ids are added in their original order."""
    idx = row_indices(ids, grad_table.shape[0]).reshape(-1)
    rows = rows.reshape(-1, grad_table.shape[1])
    order = np.argsort(idx, kind="stable")
    sorted_ids = idx[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    sums = np.add.reduceat(rows[order], starts, axis=0)
    grad_table[sorted_ids[starts]] += sums
