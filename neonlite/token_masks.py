"""Inputs that come with their own padding mask: a tokenizer's ``(ids, mask)`` pair.

:meth:`neonlite.text.Tokenizer.encode_batch` returns ``ids`` (N, T) and ``mask`` (N, T), 1 at
real tokens and 0 at pads.  ``Model.predict`` and ``Model.get_outputs`` take that pair as it
is: the ids are the inputs, and the mask replaces, batch by batch, the one each Embedding with
a ``pad_id`` reads from the ids (``Embedding.given_mask``), so self-attention and mean pooling
leave out exactly the tokens the mask marks as pads.
"""
from contextlib import contextmanager

import numpy as np

from .data import ArrayIterator
from .data.iterator import DataError
from .layers.embedding import Embedding


def is_ids_and_mask(data):
    """True for a tuple of two array-likes of the same 2-D shape (N, T): ``(ids, mask)``; a
    :class:`~neonlite.data.iterator.DataError` naming both shapes for a tuple of 2-D ids and
    a mask of another shape."""
    if not isinstance(data, tuple) or len(data) != 2:
        return False
    try:
        shapes = [np.shape(part) for part in data]
    except ValueError:  # a ragged mask
        shapes = [np.shape(data[0]), "ragged"]
    if len(shapes[0]) != 2:
        return False
    if shapes[0] != shapes[1]:
        raise DataError(f"predict input: the mask has shape {shapes[1]}; expected the ids' "
                        f"shape {shapes[0]} (N, T), as Tokenizer.encode_batch gives the pair")
    return True


def ids_and_mask_iterator(ids, mask, name="predict input"):
    """An in-order iterator yielding (ids, mask) batches, the mask checked to hold only 0 and
    1; a :class:`~neonlite.data.iterator.DataError` naming the first bad entry otherwise."""
    mask = np.asarray(mask)
    if mask.dtype.kind not in "uifb":
        raise DataError(f"{name}: the mask must be numeric 0/1, got dtype {mask.dtype}")
    bad = np.argwhere((mask != 0) & (mask != 1))
    if bad.size:
        n, t = (int(i) for i in bad[0])
        raise DataError(f"{name}: the mask must hold only 0 (pad) and 1 (real token); "
                        f"mask[{n}, {t}] is {mask[n, t]}")
    return ArrayIterator(np.asarray(ids), mask.astype(np.float32), shuffle=False, name=name)


def padding_embeddings(model, mask, name="predict input"):
    """The Embeddings of ``model`` that take a padding mask; a DataError when ``mask`` (host
    array) marks pads but the model has none (it could not leave the pads out)."""
    found = [leaf for leaf in model.layers.leaves()
             if isinstance(leaf, Embedding) and leaf.key_mask is not None]
    if not found and not np.all(np.asarray(mask) == 1):
        raise DataError(f"{name}: the mask marks pads, but model '{model.name}' has no "
                        f"Embedding with a pad_id to take it; pass the ids alone, or build "
                        f"the Embedding with pad_id")
    return found


@contextmanager
def given_mask(embeddings, mask):
    """Within the block, each of ``embeddings`` takes ``mask`` (a (bsz, T) tensor) as its
    padding mask instead of reading one from the ids."""
    for emb in embeddings:
        emb.given_mask = mask
    try:
        yield
    finally:
        for emb in embeddings:
            emb.given_mask = None
