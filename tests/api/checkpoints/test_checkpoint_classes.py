"""A classifier's class names in its checkpoint (``/classes``, the label map of an image
folder): saved, read back by ``Model.load`` and ``read_checkpoint``, and every stored value
outside the schema refused in one line naming the entry, before anything is built."""
import h5py
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.serialize import CheckpointError, read_checkpoint
from neonlite.transforms import CrossEntropyMulti, Softmax


@pytest.fixture
def saved(tmp_path):
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(16, 4)), rng.integers(0, 3, 16), nclass=3)
    model = Model([Affine(3, activation=Softmax())])
    model.fit(data, GradientDescentMomentum(0.1), 1, GeneralizedCost(CrossEntropyMulti()),
              progress=False)
    model.classes = ("cat", "dog", "émeu")
    path = tmp_path / "model.h5"
    model.save(path)
    return path


def test_class_names_survive_save_and_load(saved):
    assert read_checkpoint(saved).classes == ("cat", "dog", "émeu")
    assert Model.load(saved).classes == ("cat", "dog", "émeu")


def test_a_checkpoint_without_class_names_reads_as_none(saved):
    with h5py.File(saved, "a") as f:
        del f["classes"]
    assert read_checkpoint(saved).classes is None


@pytest.mark.parametrize("value,words", [
    (np.arange(3), "/classes is not a list of strings"),
    (["cat", "cat"], "not distinct"),
    (["cat", "do\ng"], "/classes[1]: expected a printable name"),
    (["x" * 300], "/classes[0]: expected a printable name of 1 to 255"),
    ([""], "/classes[0]"),
])
def test_class_names_outside_the_schema_are_refused(saved, value, words):
    with h5py.File(saved, "a") as f:
        del f["classes"]
        if isinstance(value, np.ndarray):
            f.create_dataset("classes", data=value)
        else:
            f.create_dataset("classes", data=[v.encode() for v in value],
                             dtype=h5py.string_dtype("utf-8"))
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(saved)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_too_many_names_are_refused_before_they_are_read(saved):
    with h5py.File(saved, "a") as f:
        del f["classes"]
        f.create_dataset("classes", shape=(1 << 21,), dtype=h5py.string_dtype("utf-8"))
    with pytest.raises(CheckpointError, match=r"/classes (declares|holds) .*more than"):
        read_checkpoint(saved)


def test_a_model_with_bad_class_names_is_not_saved(saved, tmp_path):
    model = Model.load(saved)
    model.classes = ("a", "a")
    with pytest.raises(ValueError, match="model.classes: /classes: the class names are not "
                                         "distinct"):
        model.save(tmp_path / "other.h5")
    assert not (tmp_path / "other.h5").exists()
