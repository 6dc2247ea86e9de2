"""Philox4x32-10 in numpy: the reference of the GPU backend's counter-based generator
(``kernels/cuda/philox.cu``), bit for bit.

A draw of n uniforms with ``seed`` (64-bit key) at counter ``base`` gives element e the word
``e % 4`` of ``philox(counter = base + e // 4, key = seed)`` (counter words 2 and 3 are zero),
turned into ``(word >> 8) * 2**-24`` in [0, 1).  The draw advances the counter by
``ceil(n / 4)``.  Any backend that uses :func:`uniform` makes the same dropout masks as the GPU.
"""
import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key):
    """Philox4x32 with 10 rounds.  ``counter`` (..., 4) and ``key`` (..., 2) uint32 arrays
    (broadcast against each other); returns the (..., 4) uint32 output words."""
    c = [np.asarray(counter, dtype=np.uint64)[..., i] for i in range(4)]
    key = np.asarray(key, dtype=np.uint64)
    k0, k1 = key[..., 0], key[..., 1]
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(_W0)) & _MASK
            k1 = (k1 + np.uint64(_W1)) & _MASK
        p0, p1 = _M0 * c[0], _M1 * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return np.stack(np.broadcast_arrays(*c), axis=-1).astype(np.uint32)


def seed_key(seed):
    """The (lo, hi) 32-bit words of a seed (None counts as 0)."""
    seed = int(seed or 0) & 0xFFFFFFFFFFFFFFFF
    return seed & 0xFFFFFFFF, seed >> 32


def uniform(n, seed, base):
    """n float32 uniforms in [0, 1) of the draw at counter ``base`` (see the module doc)."""
    groups = -(-n // 4)
    ctr = np.uint64(base) + np.arange(groups, dtype=np.uint64)
    counter = np.stack([ctr & _MASK, ctr >> np.uint64(32), np.zeros_like(ctr),
                        np.zeros_like(ctr)], axis=-1)
    words = philox4x32_10(counter, np.array(seed_key(seed), dtype=np.uint64)).reshape(-1)[:n]
    return (words >> 8).astype(np.float32) * np.float32(2.0 ** -24)


def draw_groups(n):
    """How far a draw of n elements advances the counter."""
    return -(-n // 4)


def example_masks(shape, keep, key, step, stream, first):
    """Inverted-dropout masks, float64 ``shape`` (N, ...), of the global examples
    ``first .. first + N - 1``: element j of example n keeps (value ``1 / keep``, rounded to
    the storage type when stored, else 0) when the uniform from word ``j % 4`` of
    ``philox4x32_10(counter=(g & 0xffffffff, g >> 32, step, stream), key)``, with
    ``g = (first + n) * ceil(D / 4) + j // 4`` and D the elements per example, is below
    ``float32(keep)``.  An example's mask depends on its global index, not on how the batch
    is split; ``kernels/cuda/philox.cu``'s ``nl_example_mask_*`` gives the same bits."""
    n, per = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    groups = -(-per // 4)
    g = (np.uint64(first) * np.uint64(groups)
         + np.arange(n * groups, dtype=np.uint64)).reshape(-1)
    counter = np.stack([g & _MASK, g >> np.uint64(32),
                        np.full_like(g, step & 0xFFFFFFFF), np.full_like(g, stream & 0xFFFFFFFF)],
                       axis=-1)
    words = philox4x32_10(counter, np.array(seed_key(key), dtype=np.uint64))
    uniform = (words.reshape(n, groups * 4)[:, :per] >> 8).astype(np.float32) * np.float32(2.0 ** -24)
    keep32 = np.float32(keep)
    return np.where(uniform < keep32, 1.0 / keep, 0.0).reshape(shape)


def example_uniforms(key, step, stream, example, per, elements):
    """The float32 uniforms of ``elements`` (int64 array of element indices, each < ``per``)
    of global example ``example`` in the stream of :func:`example_masks` with ``per`` elements
    per example: the same numbers ``example_masks`` compares with ``keep`` there, drawn only
    where asked (e.g. one attention head's probabilities)."""
    groups = -(-int(per) // 4)
    elements = np.asarray(elements, dtype=np.uint64)
    g = np.uint64(example) * np.uint64(groups) + elements // np.uint64(4)
    counter = np.stack([g & _MASK, g >> np.uint64(32), np.full_like(g, step & 0xFFFFFFFF),
                        np.full_like(g, stream & 0xFFFFFFFF)], axis=-1)
    words = philox4x32_10(counter, np.array(seed_key(key), dtype=np.uint64))
    word = np.take_along_axis(words, (elements % np.uint64(4)).astype(np.int64)[..., None],
                              axis=-1)[..., 0]
    return (word >> 8).astype(np.float32) * np.float32(2.0 ** -24)
