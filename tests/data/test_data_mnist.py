"""MNIST from IDX files: real handwriting (8,000 / 2,000 of the shared t10k set as the train /
test files), header and count checks, checksum warnings, missing files."""
import gzip
import shutil
import warnings

import numpy as np
import pytest

from neonlite import gen_backend
from neonlite.data import MNIST, ChecksumWarning, DataError
from neonlite.data.idx import read_idx, write_idx

from support.harness import data_dir
from support.requires import requires

SHARED = data_dir()
T10K = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
needs_shared = requires("mnist")


@pytest.fixture(scope="module")
def real():
    """The 10,000 real t10k images (N, 28, 28) and labels."""
    return tuple(read_idx(str(SHARED / "mnist" / f)) for f in T10K)


def _write_set(root, train, test, gz=True, plain=()):
    """The four IDX files in ``root/mnist``, gzipped when ``gz`` except those in ``plain``."""
    folder = root / "mnist"
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, (X, y) in (("train", train), ("t10k", test)):
        for name, array in ((f"{prefix}-images-idx3-ubyte", X), (f"{prefix}-labels-idx1-ubyte", y)):
            write_idx(str(folder / (name + (".gz" if gz and name not in plain else ""))), array)
    return folder


def _small(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
            rng.integers(0, 10, n).astype(np.uint8))


@needs_shared
def test_real_split_loads_as_nhwc_and_warns_about_checksums(tmp_path, real):
    X, y = real
    _write_set(tmp_path, (X[:8000], y[:8000]), (X[8000:], y[8000:]),
               plain=("train-images-idx3-ubyte",))
    with pytest.warns(ChecksumWarning, match="differs from the published MNIST"):
        (Xtr, ytr), (Xte, yte) = MNIST(path=tmp_path, download=False).load()
    assert Xtr.shape == (8000, 28, 28, 1) and Xte.shape == (2000, 28, 28, 1)
    assert Xtr.dtype == np.uint8
    np.testing.assert_array_equal(Xtr[..., 0], X[:8000])
    np.testing.assert_array_equal(yte, y[8000:])
    assert set(np.unique(ytr)) == set(range(10))


@needs_shared
def test_published_files_pass_the_checksum_without_warning(tmp_path):
    folder = _write_set(tmp_path, _small(), _small(seed=1))
    for name in T10K:
        shutil.copy(SHARED / "mnist" / name, folder / name)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        path = folder / name
        path.write_bytes(gzip.decompress(path.read_bytes()))
        path.rename(folder / name[:-3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (Xtr, _), (Xte, yte) = MNIST(path=tmp_path, download=False).load()
    assert Xtr.shape == (30, 28, 28, 1) and Xte.shape == (10000, 28, 28, 1)
    assert 892 <= np.bincount(yte).min() and np.bincount(yte).max() <= 1135


def test_uncompressed_files_and_iterators(tmp_path):
    gen_backend("cpu", batch_size=16, rng_seed=0)
    train, test = _small(40), _small(20, seed=1)
    _write_set(tmp_path, train, test, gz=False)
    data = MNIST(path=tmp_path, download=False)
    assert (data.shape, data.nclass) == ((28, 28, 1), 10)
    it = data.valid_iter
    assert (it.shape, it.target_shape, it.nbatches, it.shuffle) == ((28, 28, 1), (), 2, False)
    batches = [(x.get(), t.get(), it.valid) for x, t in it]
    np.testing.assert_allclose(batches[0][0][..., 0], test[0][:16] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(batches[0][1], test[1][:16])
    assert batches[1][2] == 4
    assert data.train_iter.shuffle and data.train_iter.X.dtype == np.uint8
    assert data.train_iter is data.train_iter


def test_data_root_from_the_environment(tmp_path, monkeypatch):
    _write_set(tmp_path, _small(), _small(12, seed=1), gz=False)
    monkeypatch.setenv("NEONLITE_DATA", str(tmp_path))
    (_, _), (Xte, _) = MNIST(download=False).load()
    assert Xte.shape == (12, 28, 28, 1)


def test_missing_files_name_what_was_looked_for_and_where(tmp_path):
    folder = _write_set(tmp_path, _small(), _small(seed=1))
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError) as err:
        MNIST(path=tmp_path, download=False).load()
    msg = str(err.value)
    assert f"{folder} lacks t10k-labels-idx1-ubyte" in msg
    assert "train-images-idx3-ubyte" in msg and f"in {folder}/" in msg


def test_files_in_the_root_instead_of_mnist_folder_get_a_hint(tmp_path):
    folder = _write_set(tmp_path, _small(), _small(seed=1), gz=False)
    for f in folder.iterdir():
        f.rename(tmp_path / f.name)
    with pytest.raises(DataError, match=f"some are in {tmp_path}/: move them into {folder}/"):
        MNIST(path=tmp_path, download=False).load()


def test_truncated_file_is_named(tmp_path):
    folder = _write_set(tmp_path, _small(), _small(seed=1), gz=False)
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(DataError, match=f"{path}: IDX size mismatch"):
        MNIST(path=tmp_path, download=False).load()


def test_corrupted_gzip_is_named(tmp_path):
    folder = _write_set(tmp_path, _small(), _small(seed=1))
    path = folder / "t10k-images-idx3-ubyte.gz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2:] = bytes(len(data) - len(data) // 2)
    path.write_bytes(bytes(data))
    with pytest.warns(ChecksumWarning), pytest.raises(DataError, match=f"{path}: cannot read"):
        MNIST(path=tmp_path, download=False).load()


def test_bad_magic_is_named(tmp_path):
    folder = _write_set(tmp_path, _small(), _small(seed=1), gz=False)
    path = folder / "train-labels-idx1-ubyte"
    path.write_bytes(b"\x1f\x00" + path.read_bytes()[2:])
    with pytest.raises(DataError, match=f"{path}: not an IDX file"):
        MNIST(path=tmp_path, download=False).load()


def test_image_and_label_counts_must_agree(tmp_path):
    X, y = _small(30)
    _write_set(tmp_path, (X, y[:29]), _small(seed=1), gz=False)
    with pytest.raises(DataError, match="train-images-idx3-ubyte holds 30 images but "
                                        "train-labels-idx1-ubyte holds 29 labels"):
        MNIST(path=tmp_path, download=False).load()


def test_wrong_image_size_and_label_range(tmp_path):
    _write_set(tmp_path, (np.zeros((5, 32, 32), np.uint8), np.zeros(5, np.uint8)),
               _small(seed=1), gz=False)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: expected uint8 images of "
                                        r"shape \(N, 28, 28\), got uint8 \(5, 32, 32\)"):
        MNIST(path=tmp_path, download=False).load()
    X, y = _small(seed=1)
    y[7] = 10
    _write_set(tmp_path, _small(), (X, y), gz=False)
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte: label 10 at index 7"):
        MNIST(path=tmp_path, download=False).load()


@needs_shared
def test_test_split_uses_only_the_t10k_files(real):
    """The shared folder holds only the t10k files: ``test_split`` trains on the first 80% of
    them and validates on the last 20%, in file order, with no train files and no download."""
    gen_backend("cpu", batch_size=100)
    (X_train, y_train), (X_valid, y_valid) = MNIST(SHARED, download=False,
                                                   test_split=0.2).load()
    images, labels = real
    assert X_train.shape == (8000, 28, 28, 1) and X_valid.shape == (2000, 28, 28, 1)
    np.testing.assert_array_equal(X_train[..., 0], images[:8000])
    np.testing.assert_array_equal(y_valid, labels[8000:])


@needs_shared
def test_without_test_split_a_t10k_folder_says_how_to_use_it():
    with pytest.raises(DataError, match=r"test_split=0\.2"):
        MNIST(SHARED, download=False).load()


@pytest.mark.parametrize("bad", [0, 1.0, -0.5, "0.2", True])
def test_test_split_must_be_a_fraction(bad):
    with pytest.raises(ValueError, match="test_split must be a fraction"):
        MNIST(test_split=bad)


@needs_shared
def test_test_split_from_yaml_trains(tmp_path, capsys):
    from neonlite.cli import main
    run = tmp_path / "run.yaml"
    run.write_text("epochs: 1\nbatchsize: 100\n"
                   "dataset: {type: mnist, config: {test_split: 0.2}}\n"
                   "layers: [{type: Affine, config: {nout: 10, activation: {type: Softmax}}}]\n"
                   "cost: CrossEntropyMulti\noptimizer: {type: Adam}\n")
    assert main(["train", str(run), "--data-dir", str(SHARED), "--max-batches", "3"]) == 0
    assert ", 8,000 train / 2,000 valid;" in capsys.readouterr().err
