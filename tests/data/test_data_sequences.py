"""SequenceIterator: bucketed batches of sequences of many lengths, each padded to its own
longest member, as views of buffers sized once; LM and label targets; deterministic,
resumable, sharded; too-long sequences cut or refused, never silently."""
import numpy as np
import pytest

from neonlite.backends import gen_backend
from neonlite.data.iterator import DataError
from neonlite.data.position import epoch_batches
from neonlite.data.sequences import SequenceIterator


def _seqs(n=37, seed=0, most=40):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 50, size=int(rng.integers(2, most + 1))) for _ in range(n)]


def _epoch(data, skip=0, state=None):
    if state is not None:
        data.be.rng.bit_generator.state = state
    return [(b, x.get().copy(), t.get().copy(), data.valid)
            for b, (x, t) in epoch_batches(data, skip)]


def test_lm_batches_cover_every_sequence_once_padded_to_their_own_longest():
    gen_backend("cpu", batch_size=4, rng_seed=1)
    seqs = _seqs()
    data = SequenceIterator(seqs, max_len=40, pad_id=0, ignore_index=-100)
    seen = []
    for _, x, t, valid in _epoch(data):
        assert x.shape == t.shape and x.shape[0] == 4
        lengths = (t != -100).sum(axis=1)
        assert x.shape[1] == lengths.max(), "a batch is padded to its own longest member"
        for row in range(valid):
            n = lengths[row]
            match = [i for i, s in enumerate(seqs)
                     if len(s) == n + 1 and np.array_equal(s[:-1], x[row, :n])]
            assert match and np.array_equal(seqs[match[0]][1:], t[row, :n])
            assert np.all(x[row, n:] == 0) and np.all(t[row, n:] == -100)
            seen.append(match[0])
    assert sorted(seen) == list(range(len(seqs)))


def test_bucketing_pads_much_less_than_the_maximum():
    gen_backend("cpu", batch_size=8, rng_seed=1)
    data = SequenceIterator(_seqs(400, most=200), max_len=200)
    total = sum(x.shape[1] for x, _ in data)
    assert total < 0.6 * data.nbatches * 200  # lengths uniform in 2..200: mean 101
    assert data.padding_fraction() < 0.1


def test_views_of_each_length_are_made_once_from_one_buffer():
    gen_backend("cpu", batch_size=4, rng_seed=1)
    data = SequenceIterator(_seqs(), max_len=40, multiple_of=8)
    first = {x.shape[1]: (x, t) for x, t in data}
    assert all(T % 8 == 0 for T in first)
    for x, t in data:
        assert first[x.shape[1]][0] is x and first[x.shape[1]][1] is t
        assert np.shares_memory(np.asarray(x), np.asarray(data._x_flat))


def test_same_seed_same_batches_and_epochs_differ():
    gen_backend("cpu", batch_size=4, rng_seed=5)
    one = SequenceIterator(_seqs(), max_len=40)
    a, b = _epoch(one), _epoch(one)
    gen_backend("cpu", batch_size=4, rng_seed=5)
    again = _epoch(SequenceIterator(_seqs(), max_len=40))
    assert all(np.array_equal(p[1], q[1]) for p, q in zip(a, again))
    assert any(p[1].shape != q[1].shape or not np.array_equal(p[1], q[1])
               for p, q in zip(a, b))


def test_batches_from_equals_the_tail_of_a_whole_epoch():
    gen_backend("cpu", batch_size=4, rng_seed=2)
    data = SequenceIterator(_seqs(), max_len=40)
    state = data.be.rng.bit_generator.state
    whole = _epoch(data, 0, state)
    after = data.be.rng.bit_generator.state
    tail = _epoch(data, 5, state)
    assert [b for b, *_ in tail] == list(range(5, data.nbatches))
    for p, q in zip(whole[5:], tail):
        assert np.array_equal(p[1], q[1]) and np.array_equal(p[2], q[2]) and p[3] == q[3]
    assert data.be.rng.bit_generator.state == after


def test_shards_split_every_global_batch_and_step_together():
    seqs = _seqs(30)
    parts = []
    for rank in range(3):
        gen_backend("cpu", batch_size=4, rng_seed=9)
        parts.append(_epoch(SequenceIterator(seqs, max_len=40).shard(rank, 3)))
    assert len({len(p) for p in parts}) == 1
    rows = [x[r] for p in parts for _, x, t, valid in p for r in range(valid)]
    assert len(rows) == len(seqs)


def test_last_partial_batch_repeats_its_own_rows_and_says_how_many_are_real():
    gen_backend("cpu", batch_size=4, rng_seed=1)
    data = SequenceIterator(_seqs(6), max_len=40, shuffle=False)
    batches = _epoch(data)
    assert [v for *_, v in batches] == [4, 2]
    _, x, _, _ = batches[-1]
    assert np.array_equal(x[2], x[0]) and np.array_equal(x[3], x[1])


def test_labels_are_one_per_sequence():
    gen_backend("cpu", batch_size=4, rng_seed=1)
    seqs = [np.arange(1, n + 1) for n in (3, 9, 4, 7, 5)]
    data = SequenceIterator(seqs, max_len=9, labels=[0, 1, 2, 0, 1], nclass=3, shuffle=False)
    x, t = next(iter(data))
    assert x.shape == (4, 7) and t.shape == (4,)
    assert list(t.get()) == [0, 2, 1, 0]
    assert data.target_shape == () and data.shape == (9,)


def test_ids_and_mask_pair_gives_each_rows_real_tokens():
    gen_backend("cpu", batch_size=2, rng_seed=1)
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    mask = (ids != 0).astype(np.int64)
    data = SequenceIterator((ids, mask), max_len=4, labels=[1, 0], nclass=2, shuffle=False)
    x, _ = next(iter(data))
    assert x.get().tolist() == [[8, 9, 0], [5, 6, 7]]


def test_too_long_is_refused_or_cut_as_configured():
    gen_backend("cpu", batch_size=2, rng_seed=1)
    seqs = [np.arange(1, 12), np.arange(1, 4)]
    with pytest.raises(DataError, match=r"sequence 0 has 10 inputs, more than max_len=6"):
        SequenceIterator(seqs, max_len=6)
    data = SequenceIterator(seqs, max_len=6, overflow="cut", shuffle=False)
    assert data.ncut == 1
    x, t = list(data)[0]
    assert x.shape == (2, 6) and t.get()[1].tolist() == [2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("kwargs, message", [
    (dict(sequences=[]), "there are no sequences"),
    (dict(sequences="abc"), "expected a list of token-id sequences"),
    (dict(sequences=[[1, 2], []]), "sequence 1 must be a non-empty 1-D"),
    (dict(sequences=[[1, 2], [1.5, 2]]), "sequence 1 must hold integer token ids"),
    (dict(sequences=[[1, -2]]), "sequence 0 holds a negative token id"),
    (dict(sequences=[[1, 0, 3]]), "holds the pad id 0 as a real token"),
    (dict(sequences=[[1]]), "sequence 0 has 1 token"),
    (dict(ignore_index=3), "ignore_index=3 is a token id of the data"),
    (dict(max_len=0), "max_len must be a positive int"),
    (dict(multiple_of=True), "multiple_of must be a positive int"),
    (dict(overflow="drop"), "overflow must be one of refuse, cut"),
    (dict(labels=[0, 1]), "labels need nclass"),
    (dict(labels=[0], nclass=2), "labels must be 2 integer class indices"),
    (dict(labels=[0, 2], nclass=2), "label 2 of sequence 1 is out of range"),
    (dict(labels=[0, 1], nclass=2, ignore_index=1), "ignore_index=1 is one of the 2 classes"),
    (dict(sequences=(np.ones((2, 3)), np.full((2, 3), 2))), "the mask must hold only 0"),
])
def test_bad_input_is_one_clear_error(kwargs, message):
    gen_backend("cpu", batch_size=2, rng_seed=1)
    args = dict(sequences=[[1, 2, 3], [4, 5]], max_len=8)
    args.update(kwargs)
    with pytest.raises(DataError, match=message):
        SequenceIterator(args.pop("sequences"), **args)


def test_unshuffled_batches_of_a_training_iterator_draw_nothing():
    gen_backend("cpu", batch_size=4, rng_seed=1)
    data = SequenceIterator(_seqs(), max_len=40)
    state = data.be.rng.bit_generator.state
    widths = [x.shape[1] for x, _ in data.batches(shuffle=False)]
    assert widths == sorted(widths) and data.be.rng.bit_generator.state == state
