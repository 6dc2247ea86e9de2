"""Model: naming, describe(), get/set_params, get_outputs and eval with a partial last batch,
and determinism (same seed, bit-identical losses)."""
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.callbacks import Callback, Callbacks
from neonlite.data import ArrayIterator
from neonlite.initializers import Constant, Gaussian, Kaiming
from neonlite.layers import (Activation, Affine, BatchNorm, Conv, Dropout, Flatten, GeneralizedCost,
                             Linear, MergeSum, Pooling, SkipNode)
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import (CrossEntropyMulti, Identity, Misclassification, Rectlin, Softmax,
                                 SumSquared)


class CostRecorder(Callback):
    """Records every minibatch cost."""

    def __init__(self):
        self.costs = []

    def on_minibatch_end(self, epoch, batch, cost):
        self.costs.append(cost)


def small_cnn():
    return Model([Conv((3, 3, 4), padding=1, init=Kaiming(), activation=Rectlin(),
                       batch_norm=True),
                  Pooling(2, strides=2, op="max"),
                  Affine(nout=16, init=Kaiming(), activation=Rectlin()),
                  Dropout(keep=0.7),
                  Affine(nout=3, init=Gaussian(scale=0.1), activation=Softmax())])


def image_data(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 8, 8, 1), dtype=np.uint8), rng.integers(0, 3, size=n)


def train_costs(seed, epochs=2):
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=seed)
    X, y = image_data()
    train = ArrayIterator(X, y, nclass=3)
    model = small_cnn()
    callbacks = Callbacks(model, progress=False)
    recorder = callbacks.add(CostRecorder())
    model.fit(train, GradientDescentMomentum(0.1, momentum_coef=0.9), num_epochs=epochs,
              cost=GeneralizedCost(CrossEntropyMulti()), callbacks=callbacks)
    return recorder.costs, model.get_params()


# ---- determinism --------------------------------------------------------------------------------
def test_same_seed_gives_bit_identical_losses():
    costs_a, params_a = train_costs(seed=7)
    costs_b, params_b = train_costs(seed=7)
    assert len(costs_a) == 2 * 3 and all(np.isfinite(costs_a))
    assert costs_a == costs_b, "same seed must give bit-identical per-batch costs"
    for key in params_a:
        assert np.array_equal(params_a[key], params_b[key]), key
    costs_c, _ = train_costs(seed=8)
    assert costs_c != costs_a, "a different seed must change the run"


# ---- naming and describe ------------------------------------------------------------------------
def test_default_names_and_describe():
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    X, y = image_data()
    model = Model([Conv((3, 3, 4), padding=1, activation=Rectlin()), Pooling(2),
                   MergeSum([[Conv((3, 3, 4), padding=1, batch_norm=True)], [SkipNode()]]),
                   Flatten(), Affine(nout=3, activation=Softmax())])
    with pytest.raises(RuntimeError, match="initialize"):
        model.describe()
    model.initialize(ArrayIterator(X, y, nclass=3), GeneralizedCost(CrossEntropyMulti()))
    names = [layer.name for layer in model.layers.layers]
    assert names == ["Conv_0", "Pooling_1", "MergeSum_2", "Flatten_3", "Affine_4"]
    counts = {"Conv_0": 3 * 3 * 1 * 4 + 4, "MergeSum_2": 3 * 3 * 4 * 4 + 4 + 4,
              "Affine_4": 4 * 4 * 4 * 3 + 3}
    total = sum(counts.values())
    assert sum(p.value.size for p in model.parameters()) == total
    text = model.describe()
    lines = text.splitlines()
    for name, shape in [("Conv_0", (8, 8, 4)), ("Pooling_1", (4, 4, 4)),
                        ("MergeSum_2", (4, 4, 4)), ("Flatten_3", (64,)), ("Affine_4", (3,))]:
        row = next(line for line in lines if line.split() and line.split()[0] == name)
        assert str(shape) in row, row
        assert row.rstrip().endswith(f"{counts.get(name, 0):,}"), row
    assert lines[-1].split()[0] == "total" and lines[-1].split()[-1] == f"{total:,}"
    assert sorted(model.get_params()) == sorted(
        ["Conv_0.W", "Conv_0.b", "MergeSum_2.branch0.Conv_0.W", "MergeSum_2.branch0.Conv_0.gamma",
         "MergeSum_2.branch0.Conv_0.beta", "MergeSum_2.branch0.Conv_0.running_mean",
         "MergeSum_2.branch0.Conv_0.running_var", "Affine_4.W", "Affine_4.b"])


# ---- parameters ---------------------------------------------------------------------------------
def test_get_set_params_round_trip():
    costs, trained = train_costs(seed=3, epochs=1)
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=99)
    X, y = image_data()
    data = ArrayIterator(X, y, nclass=3, shuffle=False)
    fresh = small_cnn()
    fresh.initialize(data)
    before = fresh.get_outputs(data)
    fresh.set_params(trained)
    got = fresh.get_params()
    assert list(got) == list(trained), "get_params keeps the layer order"
    for key in trained:
        assert np.array_equal(got[key], trained[key]), key
        assert got[key].dtype == np.float32
    after = fresh.get_outputs(data)
    assert not np.allclose(before, after)
    got["Affine_2.W"][:] = 0
    assert not np.all(fresh.get_params()["Affine_2.W"] == 0), "get_params returns copies"


# ---- partial last batch -------------------------------------------------------------------------
def identity_model(nin, nout):
    """y = x @ W + b with W, b set by the test (Identity activation)."""
    return Model([Affine(nout=nout, init=Constant(0.0), activation=Identity())])


def test_get_outputs_drops_padding_of_partial_last_batch():
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    data = ArrayIterator(X, rng.normal(size=(10, 2)), shuffle=True)
    model = identity_model(3, 2)
    model.initialize(data)
    W, b = rng.normal(size=(3, 2)), rng.normal(size=(2,))
    model.set_params({"Affine_0.W": W, "Affine_0.b": b})
    out = model.get_outputs(data)
    assert out.shape == (10, 2)
    np.testing.assert_allclose(out, X @ W + b, rtol=1e-12)
    assert be.bsz == 4 and len(data) == 3


def test_eval_averages_over_real_examples_only():
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    X = np.eye(3)[[0, 1, 2, 0, 1]]
    labels = np.array([1, 2, 0, 0, 1])
    data = ArrayIterator(X, labels, nclass=3)
    model = identity_model(3, 3)
    model.initialize(data)
    model.set_params({"Affine_0.W": np.eye(3), "Affine_0.b": np.zeros(3)})
    assert model.eval(data, Misclassification()) == pytest.approx(3 / 5)
    data_1 = ArrayIterator(X[:1], labels[:1], nclass=3)
    assert model.eval(data_1, Misclassification()) == pytest.approx(1.0)


def test_fit_then_eval_uses_running_statistics():
    neonlite.gen_backend("cpu", batch_size=5, rng_seed=0)
    rng = np.random.default_rng(1)
    X = rng.normal(3.0, 2.0, size=(20, 4))
    Y = X @ rng.normal(size=(4, 2))
    model = Model([Linear(6), BatchNorm(), Activation(Rectlin()), Affine(nout=2)])
    train = ArrayIterator(X, Y)
    cost = GeneralizedCost(SumSquared())
    model.fit(train, GradientDescentMomentum(0.01, momentum_coef=0.5), num_epochs=3, cost=cost)
    bn = model.layers.layers[1]
    assert not np.allclose(bn.running_mean.get(), 0.0)
    first = model.get_outputs(ArrayIterator(X[:5], Y[:5], shuffle=False))
    alone = model.get_outputs(ArrayIterator(X[:1], Y[:1], shuffle=False))
    np.testing.assert_allclose(alone[0], first[0], rtol=1e-5,
                               err_msg="inference output must not depend on the rest of the batch")
