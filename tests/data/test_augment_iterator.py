"""Augmentation through ``ArrayIterator(..., augment=...)`` and the image data sets: the batches
are the pipeline's output, resuming an epoch gives the same augmented batches, evaluation is
deterministic, and the data set's shape is the augmented one."""
import numpy as np
import pytest

from neonlite.backends import gen_backend
from neonlite.config.datasets import make_dataset
from neonlite.data import DataError, Shapes
from neonlite.data.augment import Flip, Normalize, PadCrop, Pipeline, epoch_key
from neonlite.data.iterator import ArrayIterator
from neonlite.data.position import epoch_batches

CIFAR = [{"type": "pad_crop", "config": {"size": 16, "pad": 4}}, {"type": "flip"}]


def _images(n=22, size=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _epoch(data, skip, state):
    data.be.rng.bit_generator.state = state
    return [(b, x.get().copy(), t.get().copy()) for b, (x, t) in epoch_batches(data, skip)]


def test_batches_are_the_pipelines_output():
    be = gen_backend("cpu", batch_size=4, rng_seed=3)
    X = _images()
    data = ArrayIterator(X, np.arange(22) % 5, nclass=5, augment=CIFAR)
    state = be.rng.bit_generator.state
    batches = _epoch(data, 0, state)
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    order = rng.permutation(22)
    key = epoch_key(rng)
    pipeline = Pipeline([PadCrop(16, pad=4), Flip()])
    for b, x, _ in batches:
        idx = order[np.arange(b * 4, b * 4 + 4) % 22]
        want = pipeline.apply(X[idx], idx, key, np.empty((4, 16, 16, 3), np.uint8))
        assert np.allclose(x, want / 255.0, atol=1e-7)
    assert not np.allclose(batches[0][1], X[order[:4]] / 255.0)


def test_resumed_epoch_gives_the_same_augmented_batches_bit_for_bit():
    be = gen_backend("cpu", batch_size=4, rng_seed=5)
    data = ArrayIterator(_images(), np.arange(22) % 5, nclass=5,
                         augment=CIFAR + [{"type": "normalize", "config": {"mean": 0.5,
                                                                           "std": 0.2}}])
    state = be.rng.bit_generator.state
    whole = _epoch(data, 0, state)
    rng_after = be.rng.bit_generator.state
    for skip in (1, 3, 5):
        tail = _epoch(data, skip, state)
        assert [b for b, _, _ in tail] == list(range(skip, 6))
        for (b, x, t), (b2, x2, t2) in zip(whole[skip:], tail):
            assert b == b2 and np.array_equal(x, x2) and np.array_equal(t, t2)
        assert be.rng.bit_generator.state == rng_after


def test_each_epoch_draws_a_new_key():
    gen_backend("cpu", batch_size=22, rng_seed=1)
    data = ArrayIterator(_images(), shuffle=False, augment=CIFAR)
    first = [x.get().copy() for x, _ in data]
    second = [x.get().copy() for x, _ in data]
    assert not np.array_equal(first[0], second[0])


def test_evaluation_pipeline_changes_nothing_and_draws_nothing():
    be = gen_backend("cpu", batch_size=22, rng_seed=1)
    X = _images()
    data = ArrayIterator(X, shuffle=False, augment=Pipeline([PadCrop(16, pad=4), Flip()],
                                                            train=False))
    state = be.rng.bit_generator.state
    (x, _), = list(data)
    assert np.allclose(x.get(), X / 255.0) and be.rng.bit_generator.state == state


def test_data_sets_augment_training_and_evaluate_validation():
    gen_backend("cpu", batch_size=8, rng_seed=2)
    ops = [{"type": "pad_crop", "config": {"size": 12, "pad": 0}}, "flip",
           {"type": "normalize", "config": {"mean": [0.5, 0.4, 0.3], "std": 0.25}}]
    data = Shapes(n=16, nvalid=8, size=16, augment=ops)
    assert data.shape == (12, 12, 3)
    assert data.train_iter.augment.train and not data.valid_iter.augment.train
    X = data.load()[1][0]
    (x, _), = list(data.valid_iter)
    want = (X[:, 2:14, 2:14] / 255.0 - np.array([0.5, 0.4, 0.3])) / 0.25
    assert np.allclose(x.get(), want, atol=1e-5)


def test_augment_needs_uint8_images():
    gen_backend("cpu", batch_size=4, rng_seed=0)
    with pytest.raises(DataError, match="train: augment needs uint8 images X"):
        ArrayIterator(np.zeros((8, 4, 4, 3), np.float32), name="train", augment=["flip"])


@pytest.mark.parametrize("config,message", [
    ({"augment": [{"type": "pad_crop", "config": {"size": 40}}]},
     "dataset.config.augment[0]: PadCrop: crop height size=40 is larger than the padded image"),
    ({"augment": [{"type": "flip", "config": {"p": 2}}]},
     "dataset.config.augment[0].config.p: Flip: p must be a number"),
    ({"augment": "flip"}, "dataset.config.augment: expected a list of augmentation ops"),
    ({"augment": [{"type": "normalize", "config": {"mean": [0, 0]}}]},
     "dataset.config.augment[0]: Normalize: mean has 2 values but the images have 3 channels"),
])
def test_yaml_augment_errors_name_the_key_path(config, message):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    with pytest.raises(DataError) as err:
        make_dataset({"type": "shapes", "config": dict(config, n=8)})
    assert message in str(err.value)


def test_normalize_output_is_the_backend_dtype():
    gen_backend("cpu", batch_size=4, rng_seed=0)
    data = ArrayIterator(_images(8), augment=[Normalize(0.5, 0.5)])
    assert data.x_host.dtype == np.float32
