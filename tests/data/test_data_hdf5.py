"""HDF5Iterator: batches read a chunk at a time from an HDF5 file match ArrayIterator's in
order, cover every example once per shuffled epoch, and bad files get clear errors."""
import h5py
import numpy as np
import pytest

from neonlite import Model, gen_backend
from neonlite.data import ArrayIterator, DataError, HDF5Dataset, HDF5Iterator
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import CrossEntropyMulti, Misclassification, Softmax


def _write(path, X, y=None, **extra):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=X)
        if y is not None:
            f.create_dataset("y", data=y)
        for key, value in extra.items():
            f.create_dataset(key, data=value)
    return path


def _images(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 4, 4, 3), dtype=np.uint8), rng.integers(0, 5, n)


def _epoch(it, shuffle):
    return [(x.get().copy(), t.get().copy(), it.valid) for x, t in it.batches(shuffle)]


@pytest.mark.parametrize("n", [23, 5, 16])
def test_in_order_batches_equal_array_iterator(tmp_path, n):
    gen_backend("cpu", batch_size=8, rng_seed=0)
    X, y = _images(n)
    path = _write(tmp_path / "d.h5", X, y)
    with HDF5Iterator(str(path), nclass=5, chunk_batches=2) as it:
        ref = ArrayIterator(X, y, nclass=5)
        assert (it.shape, it.target_shape, it.ndata, it.nbatches, len(it)) == \
            (ref.shape, ref.target_shape, ref.ndata, ref.nbatches, len(ref))
        ours, theirs = _epoch(it, False), _epoch(ref, False)
        assert len(ours) == len(theirs) == -(-n // 8)
        for (x1, t1, v1), (x2, t2, v2) in zip(ours, theirs):
            np.testing.assert_array_equal(x1, x2)
            np.testing.assert_array_equal(t1, t2)
            assert v1 == v2
        assert ours[0][0].max() <= 1.0 and ours[0][0].dtype == np.float32


def test_shuffled_epochs_cover_every_example_once_and_follow_the_seed(tmp_path):
    X = np.arange(45, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    path = _write(tmp_path / "d.h5", X, np.arange(45.0))
    runs = []
    for _ in range(2):
        gen_backend("cpu", batch_size=8, rng_seed=7)
        with HDF5Iterator(str(path), nclass=None, chunk_batches=2) as it:
            epochs = [_epoch(it, True) for _ in range(2)]
        runs.append(epochs)
        for batches in epochs:
            rows = np.concatenate([x[:v, 0] for x, _, v in batches])
            assert sorted(rows) == list(range(45))
            for x, t, _ in batches:
                np.testing.assert_array_equal(x[:, 0], t)
            last_x, _, last_valid = batches[-1]
            assert last_valid == 5
            np.testing.assert_array_equal(last_x[5:, 0], batches[0][0][:3, 0])
            for x, _, v in batches:  # rows of one batch come from at most two chunks
                assert len({int(r) // 16 for r in x[:v, 0]}) <= 2
        assert not np.array_equal(np.concatenate([b[0] for b in epochs[0]]),
                                  np.concatenate([b[0] for b in epochs[1]]))
    for (a, b) in zip(runs[0], runs[1]):
        for (x1, _, _), (x2, _, _) in zip(a, b):
            np.testing.assert_array_equal(x1, x2)


def test_trains_a_model_and_evaluates(tmp_path):
    gen_backend("cpu", batch_size=16, rng_seed=0)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    X = (rng.normal(size=(200, 6)) + 3 * np.eye(3, 6)[y]).astype(np.float32)
    data = HDF5Dataset(_write(tmp_path / "train.h5", X[:150], y[:150]).name,
                       _write(tmp_path / "valid.h5", X[150:], y[150:]).name, nclass=3,
                       path=tmp_path)
    assert data.shape == (6,)
    model = Model([Affine(3, activation=Softmax())])
    model.fit(data.train_iter, GradientDescentMomentum(0.1, momentum_coef=0.9), 3,
              GeneralizedCost(CrossEntropyMulti()))
    assert model.eval(data.valid_iter, Misclassification()) < 0.2


def test_missing_dataset_key_lists_what_the_file_has(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    X, y = _images(10)
    path = _write(tmp_path / "d.h5", X, labels=y)
    with pytest.raises(DataError, match=f"{path}: no dataset 'y' .*the file has 'labels', 'x'"):
        HDF5Iterator(str(path), nclass=5)
    with h5py.File(path, "a") as f:  # the failed iterator closed its read-only handle
        f.create_dataset("y", data=y)
    with HDF5Iterator(str(path), nclass=5) as it:
        assert it.target_shape == ()


def test_foreign_and_truncated_files(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    foreign = tmp_path / "d.h5"
    foreign.write_bytes(b"PK\x03\x04 this is a zip, not HDF5" * 10)
    with pytest.raises(DataError, match=f"{foreign}: not a readable HDF5 file"):
        HDF5Iterator(str(foreign))
    X, y = _images(200)
    path = _write(tmp_path / "t.h5", X, y)
    path.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(DataError, match=f"{path}: "):
        it = HDF5Iterator(str(path), nclass=5)
        _epoch(it, False)
    with pytest.raises(DataError, match="no such HDF5 file"):
        HDF5Iterator(str(tmp_path / "absent.h5"))


def test_bad_labels_and_counts(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    X, y = _images(10)
    y[6] = 9
    path = _write(tmp_path / "d.h5", X, y)
    with pytest.raises(DataError, match=r"'y'\[6\] = 9 is not a class index"):
        HDF5Iterator(str(path), nclass=5)
    path = _write(tmp_path / "e.h5", X, y[:9])
    with pytest.raises(DataError, match="'x' has 10 examples but 'y' has 9"):
        HDF5Iterator(str(path), nclass=10)


def test_non_finite_values_are_reported(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    X = np.ones((6, 3), np.float32)
    X[5, 1] = np.nan
    with HDF5Iterator(str(_write(tmp_path / "d.h5", X)), y=None) as it:
        assert it.t_buf is it.x_buf
        with pytest.raises(DataError, match="non-finite"):
            _epoch(it, False)


def test_a_corrupted_chunk_is_reported_with_its_rows(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    X, y = _images(200)
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=X, chunks=(10, 4, 4, 3), compression="gzip",
                         fletcher32=True)
        f.create_dataset("y", data=y)
        offset = f["x"].id.get_chunk_info(5).byte_offset
    data = bytearray(path.read_bytes())
    data[offset + 5:offset + 50] = bytes(45)
    path.write_bytes(bytes(data))
    with HDF5Iterator(str(path), nclass=5, shuffle=False, chunk_batches=4) as it:
        with pytest.raises(DataError, match=f"{path}: cannot read rows 48:64 of '/x'"):
            _epoch(it, False)
