"""CIFAR10: binary and Python-pickle batches (including a Python 2 / numpy 1 pickle as the
published files are) load as NHWC uint8; bad files get clear errors."""
import pickle
import struct

import numpy as np
import pytest

from neonlite import gen_backend
from neonlite.data import CIFAR10, DataError, UnsafePickleError
from neonlite.data.cifar10 import TEST, TRAIN

SIZES = (7, 5, 6, 5, 4, 9)  # records in data_batch_1..5 and test_batch


def _batches(seed=0):
    """[(pixels (n, 3072) uint8 channel-major, labels (n,))] for the 6 files."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
             rng.integers(0, 10, size=n)) for n in SIZES]


def _write_binary(folder, batches):
    folder.mkdir(parents=True, exist_ok=True)
    for name, (pixels, labels) in zip(TRAIN + (TEST,), batches):
        records = np.concatenate([labels.astype(np.uint8)[:, None], pixels], axis=1)
        (folder / f"{name}.bin").write_bytes(records.tobytes())


def _py2_str(data):
    """A Python 2 ``str`` (as bytes): SHORT_BINSTRING or BINSTRING."""
    if len(data) < 256:
        return b"U" + bytes([len(data)]) + data
    return b"T" + struct.pack("<i", len(data)) + data


def _py2_int(value):
    return b"J" + struct.pack("<i", value)


def _py2_ndarray(a):
    """The protocol-2 opcodes Python 2 with numpy 1.x writes for a uint8 array."""
    shape = b"(" + b"".join(_py2_int(d) for d in a.shape) + b"t"
    dtype = (b"cnumpy\ndtype\n" + _py2_str(b"u1") + b"K\x00K\x01\x87R"
             b"(K\x03" + _py2_str(b"|") + b"NNN" + _py2_int(-1) + _py2_int(-1) + b"K\x00tb")
    return (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + b"K\x00\x85"
            + _py2_str(b"b") + b"\x87R" + b"(K\x01" + shape + dtype + b"\x89"
            + _py2_str(a.tobytes()) + b"tb")


def _py2_pickle(pixels, labels):
    """A batch file as CIFAR-10's cifar-10-batches-py holds it (pickled by Python 2)."""
    items = (_py2_str(b"batch_label") + _py2_str(b"training batch 1 of 5")
             + _py2_str(b"labels") + b"](" + b"".join(_py2_int(int(v)) for v in labels) + b"e"
             + _py2_str(b"data") + _py2_ndarray(pixels)
             + _py2_str(b"filenames") + b"](" + _py2_str(b"x.png") * len(labels) + b"e")
    return b"\x80\x02}(" + items + b"u."


def _write_pickled(folder, batches, py2=True):
    folder.mkdir(parents=True, exist_ok=True)
    for name, (pixels, labels) in zip(TRAIN + (TEST,), batches):
        data = _py2_pickle(pixels, labels) if py2 else pickle.dumps(
            {"data": pixels, "labels": [int(v) for v in labels]}, protocol=4)
        (folder / name).write_bytes(data)


def _expected(batches):
    def nhwc(pixels):
        return pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    train = (np.concatenate([nhwc(p) for p, _ in batches[:5]]),
             np.concatenate([lab for _, lab in batches[:5]]))
    return train, (nhwc(batches[5][0]), batches[5][1])


def _check(data, batches):
    (Xtr, ytr), (Xte, yte) = data.load()
    (eXtr, eytr), (eXte, eyte) = _expected(batches)
    assert Xtr.shape == (sum(SIZES[:5]), 32, 32, 3) and Xtr.dtype == np.uint8
    assert Xte.shape == (SIZES[5], 32, 32, 3) and Xte.dtype == np.uint8
    np.testing.assert_array_equal(Xtr, eXtr)
    np.testing.assert_array_equal(ytr, eytr)
    np.testing.assert_array_equal(Xte, eXte)
    np.testing.assert_array_equal(yte, eyte)
    # pixel (row 2, column 5) of the first image's green plane is byte 1024 + 2*32 + 5
    assert Xtr[0, 2, 5, 1] == batches[0][0][0, 1024 + 2 * 32 + 5]


@pytest.mark.parametrize("sub", ["", "cifar-10-batches-bin"])
def test_binary_batches(tmp_path, sub):
    batches = _batches()
    _write_binary(tmp_path / "cifar10" / sub if sub else tmp_path / "cifar10", batches)
    _check(CIFAR10(path=tmp_path), batches)


@pytest.mark.parametrize("py2", [True, False])
def test_python_batches(tmp_path, py2):
    batches = _batches(1)
    _write_pickled(tmp_path / "cifar10" / "cifar-10-batches-py", batches, py2)
    _check(CIFAR10(path=tmp_path), batches)


def test_iterators_scale_and_one_hot(tmp_path):
    gen_backend("cpu", batch_size=8, rng_seed=0)
    batches = _batches(2)
    _write_binary(tmp_path / "cifar10", batches)
    data = CIFAR10(path=tmp_path)
    assert data.shape == (32, 32, 3) and data.nclass == 10
    it = data.valid_iter
    assert (it.shape, it.target_shape, it.nbatches) == ((32, 32, 3), (), 2)
    x, t = next(iter(it.batches(shuffle=False)))
    (eX, ey) = _expected(batches)[1]
    np.testing.assert_allclose(x.get(), eX[:8] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(t.get(), ey[:8])
    assert data.train_iter.X.dtype == np.uint8 and data.train_iter.ndata == sum(SIZES[:5])


def test_missing_folder_names_the_files_and_where_to_put_them(tmp_path):
    with pytest.raises(DataError) as err:
        CIFAR10(path=tmp_path).load()
    msg = str(err.value)
    assert "data_batch_1" in msg and "test_batch" in msg
    assert str(tmp_path / "cifar10") in msg and "cifar-10-binary.tar.gz" in msg


def test_incomplete_set_names_the_missing_file(tmp_path):
    _write_binary(tmp_path / "cifar10", _batches())
    (tmp_path / "cifar10" / "data_batch_4.bin").unlink()
    with pytest.raises(DataError, match="lacks data_batch_4.bin"):
        CIFAR10(path=tmp_path).load()


def test_truncated_binary_batch(tmp_path):
    _write_binary(tmp_path / "cifar10", _batches())
    path = tmp_path / "cifar10" / "data_batch_2.bin"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match=f"{path}: .* not a whole.*3073-byte records"):
        CIFAR10(path=tmp_path).load()


def test_bad_label_names_file_and_record(tmp_path):
    batches = _batches()
    batches[5][1][3] = 12
    _write_binary(tmp_path / "cifar10", batches)
    with pytest.raises(DataError, match="test_batch.bin: label 12 of record 3"):
        CIFAR10(path=tmp_path).load()


def test_malicious_python_batch_is_refused(tmp_path):
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    _write_pickled(folder, _batches(), py2=False)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (__import__("os").system, (f"touch {marker}",))

    (folder / "data_batch_3").write_bytes(pickle.dumps({"data": Payload()}))
    with pytest.raises(UnsafePickleError, match="data_batch_3"):
        CIFAR10(path=tmp_path).load()
    assert not marker.exists()


def test_python_batch_of_the_wrong_shape(tmp_path):
    folder = tmp_path / "cifar10"
    batches = _batches()
    _write_pickled(folder, batches, py2=False)
    (folder / "test_batch").write_bytes(pickle.dumps(
        {"data": np.zeros((3, 1024), np.uint8), "labels": [0, 1, 2]}))
    with pytest.raises(DataError, match=r"test_batch: 'data' must be a uint8 array of shape "
                                        r"\(N, 3072\), got uint8 \(3, 1024\)"):
        CIFAR10(path=tmp_path).load()
