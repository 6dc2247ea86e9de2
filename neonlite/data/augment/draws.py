"""The random numbers of augmentation: Philox keyed on (epoch key, sample index).

Op number ``stream`` of a pipeline draws, for the sample at data set index ``i``, ``count``
uniforms: uniform ``u`` is word ``u % 4`` of ``philox4x32_10(counter=(i & 0xffffffff, i >> 32,
stream, u // 4), key=(epoch_key & 0xffffffff, epoch_key >> 32))``, as ``(word >> 8) * 2**-24``
in [0, 1) (the conversion of :func:`backends.philox.uniform`).  A sample's numbers depend on
nothing but (epoch key, index, op), so they are the same bits whatever the batch it is in, its
place in the batch, the worker or thread that augments it, and whether the epoch was resumed.
"""
import numpy as np

from ...backends.philox import philox4x32_10, seed_key

_MASK = np.uint64(0xFFFFFFFF)


def epoch_key(rng):
    """One uint64 drawn from the host RNG ``rng`` (a numpy ``Generator``, the backend's
    ``be.rng``) when an epoch starts: the key of the epoch's augmentation."""
    return np.uint64(rng.integers(0, 2 ** 64, dtype=np.uint64))


def sample_uniforms(key, indices, stream, count):
    """(N, count) float64 uniforms in [0, 1) of op ``stream`` for the samples at data set
    ``indices`` (N,) under epoch ``key`` (see the module doc); each is a multiple of 2**-24."""
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64).reshape(-1)
    groups = -(-int(count) // 4)
    n = idx.shape[0]
    if n == 0 or count == 0:
        return np.zeros((n, int(count)))
    block = np.arange(groups, dtype=np.uint64)
    i = np.repeat(idx, groups)
    counter = np.stack([i & _MASK, i >> np.uint64(32),
                        np.full(n * groups, np.uint64(stream) & _MASK, dtype=np.uint64),
                        np.tile(block, n)], axis=-1)
    words = philox4x32_10(counter, np.array(seed_key(int(key)), dtype=np.uint64))
    words = words.reshape(n, groups * 4)[:, :count]
    return (words >> 8).astype(np.float64) * 2.0 ** -24


def below(u, n):
    """Integers in [0, n) from uniforms ``u`` (floor of ``u * n``; ``n`` broadcast, >= 1)."""
    return np.minimum(np.floor(u * n).astype(np.int64), np.asarray(n, dtype=np.int64) - 1)
