"""Checkpoint files: Model.save / Model.load, the format version check, truncated and foreign
files, and the write-to-a-temporary-name-then-rename guarantee."""
import h5py
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.cli import main
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, BatchNorm, Dropout, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.serialize import FORMAT_VERSION, CheckpointError, read_checkpoint
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax


def trained_model(seed=0):
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=seed)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(40, 5)), rng.integers(0, 3, 40), nclass=3)
    model = Model([Affine(6, activation=Rectlin()), BatchNorm(), Dropout(0.8),
                   Affine(3, activation=Softmax())])
    model.fit(data, GradientDescentMomentum(0.1, momentum_coef=0.9), 2,
              GeneralizedCost(CrossEntropyMulti()))
    return model, data


@pytest.fixture
def saved(tmp_path):
    model, data = trained_model()
    path = tmp_path / "model.h5"
    model.save(path)
    return model, data, path


def test_save_and_load_give_the_same_model(saved):
    model, data, path = saved
    loaded = Model.load(path)
    assert loaded.get_description()["layers"] == model.get_description()["layers"]
    a, b = model.get_params(), loaded.get_params()
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)
    np.testing.assert_array_equal(model.get_outputs(data), loaded.get_outputs(data))
    assert (loaded.epoch_index, loaded.step_index) == (2, 10)


def test_checkpoint_holds_description_state_and_version(saved):
    model, _, path = saved
    ckpt = read_checkpoint(path)
    assert ckpt.config["optimizer"]["type"] == "GradientDescentMomentum"
    assert ckpt.config["cost"]["config"]["costfunc"]["type"] == "CrossEntropyMulti"
    assert set(ckpt.states) == {p.name for p in model.parameters()}
    assert all(set(s) == {"velocity"} for s in ckpt.states.values())
    assert ckpt.optimizer_state == {"default": {"step": 10}}
    assert ckpt.rng["host"]["bit_generator"] == "PCG64" and ckpt.rng["device"] is not None
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "neonlite-checkpoint"
        assert f.attrs["format_version"] == FORMAT_VERSION
        assert isinstance(f["config"][()], bytes)


def test_save_leaves_no_temporary_file(saved):
    _, _, path = saved
    assert [p.name for p in path.parent.iterdir()] == ["model.h5"]


def test_interrupted_save_keeps_the_previous_file(saved, monkeypatch):
    model, _, path = saved
    before = path.read_bytes()

    def broken():
        raise KeyboardInterrupt
    monkeypatch.setattr(model, "get_params", broken)
    with pytest.raises(KeyboardInterrupt):
        model.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["model.h5"]


@pytest.mark.parametrize("version, words", [(FORMAT_VERSION + 1, "is newer than this neonlite"),
                                            (0, "is older than this neonlite")])
def test_other_format_versions_are_refused(saved, version, words):
    _, _, path = saved
    with h5py.File(path, "a") as f:
        f.attrs["format_version"] = version
    with pytest.raises(CheckpointError, match=f"format version {version} {words}"):
        read_checkpoint(path)


def test_truncated_file_is_refused(saved):
    _, _, path = saved
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable HDF5 file; it may be truncated"):
        read_checkpoint(path)


def test_foreign_hdf5_file_is_refused(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(CheckpointError, match="not a neonlite checkpoint"):
        read_checkpoint(path)


def test_text_file_is_refused(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_text("hello")
    with pytest.raises(CheckpointError, match="not a readable HDF5 file"):
        read_checkpoint(path)


def test_damaged_contents_are_refused(saved):
    _, _, path = saved
    with h5py.File(path, "a") as f:
        del f["progress"]
    with pytest.raises(CheckpointError, match="damaged checkpoint"):
        read_checkpoint(path)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        read_checkpoint(tmp_path / "nope.h5")


def test_cli_reports_a_bad_checkpoint_in_one_line(saved, capsys):
    _, _, path = saved
    path.write_bytes(path.read_bytes()[:100])
    assert main(["eval", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"neonlite: error: {path}: not a readable HDF5 file")


def test_loading_never_unpickles(saved):
    _, _, path = saved
    with h5py.File(path, "r") as f:
        kinds = set()
        f.visititems(lambda name, obj: kinds.add(obj.dtype.kind)
                     if isinstance(obj, h5py.Dataset) else None)
    assert kinds <= {"f", "u", "i", "O", "S"}, "only numbers and strings are stored"


def test_format_version_1_files_still_read(saved):
    model, _, path = saved
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = 1
        for group in (f["params"], f["optimizer/states"]):
            group.visititems(lambda name, obj: obj.attrs.__delitem__("crc32")
                             if "crc32" in obj.attrs else None)
    ckpt = read_checkpoint(path)
    for key, value in model.get_params().items():
        assert np.array_equal(ckpt.params[key], value)


def test_version_2_arrays_need_their_checksum(saved):
    _, _, path = saved
    with h5py.File(path, "r+") as f:
        name = next(iter(f["params"]))
        del f["params"][name].attrs["crc32"]
    with pytest.raises(CheckpointError, match="no crc32 checksum"):
        read_checkpoint(path)


def test_a_flipped_byte_in_parameter_data_is_detected(saved):
    _, _, path = saved
    with h5py.File(path, "r") as f:
        name = next(iter(f["params"]))
        offset = f["params"][name].id.get_offset()
    with open(path, "r+b") as out:
        out.seek(offset + 2)
        byte = out.read(1)
        out.seek(offset + 2)
        out.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(CheckpointError, match=f"/params/{name}: checksum mismatch"):
        read_checkpoint(path)
