"""Resuming an epoch part-way (neonlite.data.position): an iterator's ``batches_from(skip)``
gives exactly the batches ``skip..`` that a whole epoch gives from the same RNG state, without
producing the batches before them, and ``--max-batches`` keeps its cut."""
import numpy as np

from neonlite.backends import gen_backend
from neonlite.cli.session import FirstBatches
from neonlite.data.iterator import ArrayIterator
from neonlite.data.position import epoch_batches


def _epoch(data, skip, state):
    data.be.rng.bit_generator.state = state
    return [(b, x.get().copy(), t.get().copy()) for b, (x, t) in epoch_batches(data, skip)]


def _data(fills=None):
    gen_backend("cpu", batch_size=4, rng_seed=3)
    X = np.arange(22 * 3, dtype=np.float32).reshape(22, 3)
    data = ArrayIterator(X, np.arange(22) % 5, nclass=5)
    if fills is not None:
        fill = data._fill
        data._fill = lambda idx: (fills.append(idx.copy()), fill(idx))
    return data


def test_batches_from_equals_the_tail_of_a_whole_epoch():
    fills = []
    data = _data(fills)
    state = data.be.rng.bit_generator.state
    whole = _epoch(data, 0, state)
    fills.clear()
    tail = _epoch(data, 4, state)
    assert [b for b, _, _ in tail] == [4, 5]
    for (b, x, t), (b2, x2, t2) in zip(whole[4:], tail):
        assert b == b2 and np.array_equal(x, x2) and np.array_equal(t, t2)
    assert len(fills) == 2, "batches before the resume point must not be filled"
    assert data.be.rng.bit_generator.state == _rng_after_whole(data, state)


def _rng_after_whole(data, state):
    data.be.rng.bit_generator.state = state
    for _ in data:
        pass
    return data.be.rng.bit_generator.state


def test_max_batches_cut_holds_when_resuming():
    data = _data()
    state = data.be.rng.bit_generator.state
    cut = FirstBatches(data, 3)
    whole = _epoch(cut, 0, state)
    tail = _epoch(cut, 1, state)
    assert [b for b, _, _ in whole] == [0, 1, 2]
    assert [b for b, _, _ in tail] == [1, 2]
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(whole[1:], tail))
