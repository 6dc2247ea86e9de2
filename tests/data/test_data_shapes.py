"""Shapes: deterministic procedurally generated images; filled and outlined shapes are
distinct classes; a linear model does clearly worse on them than a small CNN."""
import numpy as np
import pytest

from neonlite import Model, gen_backend
from neonlite.data import ArrayIterator, Shapes
from neonlite.data.shapes import CLASSES, _coverage
from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Misclassification, Rectlin, Softmax


def test_deterministic_from_the_seed():
    a = Shapes(n=64, size=20, seed=3, nvalid=16).load()
    b = Shapes(n=64, size=20, seed=3, nvalid=16).load()
    c = Shapes(n=64, size=20, seed=4, nvalid=16).load()
    for (Xa, ya), (Xb, yb) in zip(a, b):
        np.testing.assert_array_equal(Xa, Xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a[0][0], c[0][0])
    assert not np.array_equal(a[0][0][:16], a[1][0])


def test_layout_balance_and_class_selection():
    data = Shapes(n=80, size=24, seed=0)
    (X, y), (Xv, yv) = data.load()
    assert X.shape == (80, 24, 24, 3) and X.dtype == np.uint8 and Xv.shape == (16, 24, 24, 3)
    assert data.shape == (24, 24, 3) and data.nclass == 8 and data.class_names == CLASSES
    np.testing.assert_array_equal(np.bincount(y), [10] * 8)
    assert X.std() > 20
    assert Shapes(n=8, classes=4).class_names == ("circle", "square", "triangle", "cross")
    picked = Shapes(n=30, size=16, classes=["cross_outline", "circle"], nvalid=6)
    assert picked.nclass == 2 and set(picked.load()[0][1]) == {0, 1}


def test_outlines_are_rings_around_the_filled_shapes():
    """Same shape parameters, filled and outlined: the centre is covered only when filled,
    and an outline fully covers far fewer pixels than the filled shape."""
    rng = np.random.default_rng(0)
    m, grid = 200, np.arange(32, dtype=np.float32) + 0.5
    cx, cy = rng.integers(12, 20, m) + 0.5, rng.integers(12, 20, m) + 0.5
    theta, half = rng.uniform(0, 2 * np.pi, m), rng.uniform(0.2, 0.4, m) * 32
    kind = np.arange(m) % 4
    filled = _coverage(grid, cx, cy, theta, half, kind, np.zeros(m, bool))
    ring = _coverage(grid, cx, cy, theta, half, kind, np.ones(m, bool))
    centre = (np.arange(m), cy.astype(int), cx.astype(int))
    assert np.all(filled[centre] == 1.0) and np.all(ring[centre] == 0.0)
    assert filled.min() == 0.0 and filled.max() == 1.0 and ring.max() == 1.0
    full_filled, full_ring = (filled == 1).sum(axis=(1, 2)), (ring == 1).sum(axis=(1, 2))
    assert np.all(full_filled > 2 * full_ring)


def test_iterators(tmp_path):
    gen_backend("cpu", batch_size=16, rng_seed=0)
    data = Shapes(n=40, size=16, seed=1, nvalid=10)
    train, valid = data.train_iter, data.valid_iter
    assert isinstance(train, ArrayIterator) and train.shuffle and not valid.shuffle
    assert (train.shape, train.target_shape, train.nbatches) == ((16, 16, 3), (), 3)
    x, t = next(iter(valid))
    np.testing.assert_allclose(x.get()[:10], data.load()[1][0] / 255.0, rtol=1e-6)
    assert valid.valid == 10
    wide = Shapes(n=40, size=16, seed=1, nvalid=10, nclass=10)
    _, t = next(iter(wide.valid_iter))
    assert t.shape == (16,) and t.dtype == np.int32 and t.get().max() < 8
    np.testing.assert_array_equal(t.get()[:10], data.load()[1][1])


@pytest.mark.parametrize("kwargs,match", [
    ({"n": 0}, "n must be a positive integer"), ({"size": 4}, "size must be an integer >= 8"),
    ({"classes": 9}, "classes must be 2..8"), ({"classes": ["circle", "oval"]}, "distinct names"),
    ({"scale": (0.3, 0.2)}, "scale must be"), ({"scale": [0.1, 0.2, 0.3]}, "scale must be"),
    ({"nvalid": 0}, "nvalid must be"), ({"seed": -1}, "seed must be a non-negative"),
    ({"nclass": 7}, r"nclass \(the width of the one-hot targets\) must be an integer >= the 8")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Shapes(**kwargs)


def _train(layers, data, epochs, lr):
    model = Model(layers)
    model.fit(data.train_iter, Adam(learning_rate=lr), epochs,
              GeneralizedCost(CrossEntropyMulti()))
    return model.eval(data.valid_iter, Misclassification())


def test_a_small_cnn_clearly_beats_a_linear_model():
    gen_backend("cpu", batch_size=32, rng_seed=0)
    data = Shapes(n=3000, size=16, seed=0, nvalid=1000)
    linear = _train([Affine(8, activation=Softmax())], data, 3, 1e-3)
    cnn = _train([Conv((3, 3, 16), padding=1, activation=Rectlin(), batch_norm=True),
                  Pooling(2),
                  Conv((3, 3, 32), padding=1, activation=Rectlin(), batch_norm=True),
                  Pooling(2),
                  Conv((3, 3, 64), padding=1, activation=Rectlin(), batch_norm=True),
                  Pooling(4),
                  Affine(8, activation=Softmax())], data, 3, 3e-3)
    assert cnn < linear - 0.2, f"CNN misclassification {cnn:.3f} vs linear {linear:.3f}"
