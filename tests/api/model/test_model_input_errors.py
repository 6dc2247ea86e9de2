"""Bad input gets one clear error (what, where, what was expected) and changes nothing."""
import importlib.util

import numpy as np
import pytest

import neonlite
from neonlite import BackendUnavailable, Model
from neonlite.data import ArrayIterator, DataError
from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling, ShapeError
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import (CrossEntropyMulti, Misclassification, Rectlin, Softmax,
                                 SumSquared)


@pytest.fixture
def cpu():
    return neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)


def images(n=8, shape=(6, 6, 1), seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n,) + shape), rng.integers(0, 3, size=n)


def cnn():
    return Model([Conv((3, 3, 2), padding=1, activation=Rectlin()), Pooling(2),
                  Affine(nout=3, activation=Softmax())])


def assert_unchanged(model, params):
    now = model.get_params()
    assert list(now) == list(params)
    for key in params:
        assert np.array_equal(now[key], params[key]), f"{key} changed"


# ---- shapes -------------------------------------------------------------------------------------
def test_wrong_input_shape_names_both_layers_and_shapes(cpu):
    model = Model([Affine(nout=10), Conv((3, 3, 2)), Affine(nout=3)])
    X, y = images()
    with pytest.raises(ShapeError) as err:
        model.initialize(ArrayIterator(X, y, nclass=3))
    msg = str(err.value)
    assert "'Conv_1'" in msg and "'Affine_0'" in msg and "(10,)" in msg and "(H, W, C)" in msg


def test_first_layer_shape_error_names_the_model_input(cpu):
    X, y = images(shape=(36,))
    with pytest.raises(ShapeError, match=r"'Conv_0'.*model input.*\(36,\)"):
        cnn().initialize(ArrayIterator(X, y, nclass=3))


def test_filter_that_does_not_fit_is_a_shape_error(cpu):
    X, y = images(shape=(2, 2, 1))
    with pytest.raises(ShapeError, match=r"'Conv_0'.*\(2, 2, 1\)"):
        Model([Conv((3, 3, 2))]).initialize(ArrayIterator(X, y, nclass=3))


def test_failed_initialize_leaves_model_usable(cpu):
    model = cnn()
    X, y = images(shape=(36,))
    with pytest.raises(ShapeError):
        model.initialize(ArrayIterator(X, y, nclass=3))
    X, y = images()
    data = ArrayIterator(X, y, nclass=3)
    model.initialize(data, GeneralizedCost(CrossEntropyMulti()))
    assert model.get_outputs(data).shape == (8, 3)


def test_target_shape_mismatch(cpu):
    X, y = images()
    model = cnn()
    with pytest.raises(ShapeError, match=r"targets have shape \(5,\).*output has shape \(3,\)"):
        model.fit(ArrayIterator(X, y, nclass=5), GradientDescentMomentum(0.1), num_epochs=1,
                  cost=GeneralizedCost(CrossEntropyMulti()))


def test_trained_model_rejects_a_different_example_shape(cpu):
    X, y = images()
    model = cnn()
    cost = GeneralizedCost(CrossEntropyMulti())
    model.fit(ArrayIterator(X, y, nclass=3), GradientDescentMomentum(0.1), num_epochs=1, cost=cost)
    params = model.get_params()
    X2, y2 = images(shape=(8, 8, 1))
    other = ArrayIterator(X2, y2, nclass=3)
    for call in (lambda: model.fit(other, GradientDescentMomentum(0.1), num_epochs=2, cost=cost),
                 lambda: model.eval(other, Misclassification()),
                 lambda: model.get_outputs(other)):
        with pytest.raises(ShapeError, match=r"\(6, 6, 1\).*\(8, 8, 1\)"):
            call()
    assert_unchanged(model, params)


def test_trained_model_rejects_different_targets_with_the_same_cost(cpu):
    X, y = images()
    model = cnn()
    cost = GeneralizedCost(CrossEntropyMulti())
    model.fit(ArrayIterator(X, y, nclass=3), GradientDescentMomentum(0.1), num_epochs=1, cost=cost)
    params = model.get_params()
    with pytest.raises(ShapeError, match=r"targets have shape \(4,\).*output has shape \(3,\)"):
        model.fit(ArrayIterator(X, y, nclass=4), GradientDescentMomentum(0.1), num_epochs=2,
                  cost=cost)
    assert_unchanged(model, params)


# ---- data ---------------------------------------------------------------------------------------
def test_misshaped_batch_into_a_built_model_is_a_shape_error(cpu):
    """Model.fprop / train_step / bprop on a batch other than the one the buffers were made
    for: one ShapeError naming the shapes, nothing written (the kernels would have read and
    written outside the buffers)."""
    X, y = images()
    model = cnn()
    model.initialize(ArrayIterator(X, y, nclass=3), GeneralizedCost(CrossEntropyMulti()))
    params = model.get_params()
    targets = cpu.array(np.eye(3)[y[:4]])
    for shape in [(4, 6, 6, 2), (4, 5, 6, 1), (8, 6, 6, 1), (4, 36)]:
        x = cpu.array(np.ones(shape))
        with pytest.raises(ShapeError, match=rf"model: the input has shape "
                                             rf"\({', '.join(map(str, shape))}\); "
                                             rf"expected \(4, 6, 6, 1\)"):
            model.fprop(x)
        with pytest.raises(ShapeError):
            model.train_step(x, targets, GradientDescentMomentum(0.1), 0)
    model.fprop(cpu.array(X[:4]))
    with pytest.raises(ShapeError, match=r"output gradient has shape \(4, 5\); expected "
                                         r"\(4, 3\)"):
        model.bprop(cpu.array(np.ones((4, 5))))
    assert_unchanged(model, params)


def test_mismatched_matrix_product_is_an_error(cpu):
    a, out = cpu.array(np.ones((4, 30))), cpu.array(np.zeros((4, 10)))
    # MKL's products say "(4, 30) @ (20, 10)", numpy's matmul "size 20 is different from 30"
    with pytest.raises(ValueError, match=r"30.*20|20.*30"):
        cpu.compound_dot(a, cpu.array(np.ones((20, 10))), out)
    with pytest.raises(ValueError):
        cpu.compound_dot(a, cpu.array(np.ones((30, 10))), cpu.array(np.zeros((5, 10))))
    assert np.array_equal(out.get(), np.zeros((4, 10)))


def test_labels_out_of_range(cpu):
    X, _ = images()
    y = np.array([0, 1, 2, 0, 3, 1, 0, 2])
    with pytest.raises(DataError, match=r"label 3 at index 4.*nclass=3"):
        ArrayIterator(X, y, nclass=3)
    with pytest.raises(DataError, match=r"label -1 at index 0"):
        ArrayIterator(X, -np.ones(8, dtype=int), nclass=3)
    with pytest.raises(DataError, match="one integer class index per example"):
        ArrayIterator(X, np.full(8, 1.5), nclass=3)


def test_nan_in_data(cpu):
    X, y = images()
    X[2, 1, 3, 0] = np.nan
    with pytest.raises(DataError, match=r"X contains a non-finite value \(nan\) at index "
                                        r"\(2, 1, 3, 0\)"):
        ArrayIterator(X, y, nclass=3)
    X[2, 1, 3, 0] = np.inf
    with pytest.raises(DataError, match="non-finite"):
        ArrayIterator(X, y, nclass=3)
    targets = np.ones((8, 2))
    targets[5, 1] = np.nan
    with pytest.raises(DataError, match=r"y contains a non-finite value.*\(5, 1\)"):
        ArrayIterator(np.ones((8, 3)), targets)


def test_empty_data_set(cpu):
    with pytest.raises(DataError, match="empty"):
        ArrayIterator(np.zeros((0, 6, 6, 1)), np.zeros(0, dtype=int), nclass=3)


def test_label_count_mismatch(cpu):
    X, y = images()
    with pytest.raises(DataError, match="8 examples but y has 7"):
        ArrayIterator(X, y[:7], nclass=3)


# ---- set_params ---------------------------------------------------------------------------------
@pytest.fixture
def trained(cpu):
    X, y = images()
    model = cnn()
    model.fit(ArrayIterator(X, y, nclass=3), GradientDescentMomentum(0.1), num_epochs=1,
              cost=GeneralizedCost(CrossEntropyMulti()))
    return model, model.get_params()


def test_set_params_missing_key(trained):
    model, params = trained
    bad = {k: np.zeros_like(v) for k, v in params.items() if k != "Affine_2.b"}
    with pytest.raises(KeyError, match=r"missing parameter 'Affine_2.b' \(expected shape \(3,\)\)"):
        model.set_params(bad)
    assert_unchanged(model, params)


def test_set_params_misshaped_key(trained):
    model, params = trained
    bad = {k: np.zeros_like(v) for k, v in params.items()}
    bad["Affine_2.W"] = np.zeros((3, 18))
    with pytest.raises(ValueError, match=r"'Affine_2.W' has shape \(3, 18\), expected \(18, 3\)"):
        model.set_params(bad)
    assert_unchanged(model, params)


def test_set_params_unexpected_key(trained):
    model, params = trained
    bad = dict(params, **{"Affine_9.W": np.zeros(3)})
    with pytest.raises(KeyError, match="unexpected parameter 'Affine_9.W'"):
        model.set_params(bad)
    assert_unchanged(model, params)


def test_set_params_before_initialize(cpu):
    with pytest.raises(RuntimeError, match="initialize"):
        cnn().set_params({})


# ---- backends -----------------------------------------------------------------------------------
def test_gpu_backend_unavailable_is_an_error_with_a_reason():
    try:
        be = neonlite.gen_backend("gpu", batch_size=4)
    except BackendUnavailable as err:
        msg = str(err)
        assert len(msg) > 20, f"the error must say why: {msg!r}"
        if importlib.util.find_spec("pycuda") is None:
            assert "pycuda" in msg
        else:
            assert "CUDA" in msg or "device" in msg or "kernel" in msg, msg
    else:
        assert be.name == "gpu", "asking for 'gpu' must never silently give another backend"


def test_unknown_backend_lists_registered_ones():
    with pytest.raises(ValueError, match=r"unknown backend 'tpu'.*cpu.*gpu"):
        neonlite.gen_backend("tpu")


def test_bad_batch_size_and_dtype():
    with pytest.raises(ValueError, match="batch_size"):
        neonlite.gen_backend("cpu", batch_size=0)
    with pytest.raises(ValueError, match="int32"):
        neonlite.gen_backend("cpu", datatype=np.int32)


def test_switching_cost_on_a_trained_model_unfuses_the_softmax(cpu):
    """After training with CrossEntropyMulti (fused with the Softmax), fitting with SumSquared
    must backpropagate through the Softmax again: gradients equal a fresh model's."""
    X, y = images()
    data = ArrayIterator(X, y, nclass=3, shuffle=False)
    model = cnn()
    model.fit(data, GradientDescentMomentum(0.1), num_epochs=1,
              cost=GeneralizedCost(CrossEntropyMulti()))
    model.initialize(data, GeneralizedCost(SumSquared()))
    fresh = cnn()
    fresh.initialize(data, GeneralizedCost(SumSquared()))
    fresh.set_params(model.get_params())
    x, t = next(data.batches(shuffle=False))
    grads = []
    for m in (model, fresh):
        m.zero_grads()
        _, delta = m.cost.cost_and_errors(m.fprop(x), t)
        m.bprop(delta)
        grads.append([p.grad.get() for p in m.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
