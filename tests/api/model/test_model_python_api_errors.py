"""The Python API's misuses end in one clear exception before anything runs (or work):
``fprop`` before initializing, one layer object in two models, ``set_params`` with arrays of
the wrong dtype, a backend of another data type or batch size made after training; a model
whose first layer has no parameters trains; and ``pickle`` / ``copy.deepcopy`` of a model go
through its checkpoint's bytes (never through arbitrary objects)."""
import copy
import gc
import pickle
import pickletools

import numpy as np
import pytest

from neonlite import Model, gen_backend
from neonlite.config import ConfigError
from neonlite.data import ArrayIterator
from neonlite.initializers import Gaussian
from neonlite.layers import (LRN, Activation, Affine, BatchNorm, Dropout, Flatten,
                             GeneralizedCost, LayerNorm, Pooling)
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import CrossEntropyMulti, Gelu, Rectlin, Softmax, Tanh

RNG = np.random.default_rng(0)
X = RNG.random((32, 5)).astype(np.float32)
Y = RNG.integers(0, 3, 32)


@pytest.fixture(autouse=True)
def backend():
    return gen_backend("cpu", batch_size=8, rng_seed=0)


def classifier(name=None):
    return Model([Affine(nout=6, init=Gaussian(), activation=Rectlin()),
                  Affine(nout=3, init=Gaussian(), activation=Softmax())],
                 **({"name": name} if name else {}))


def train(model, x=X, epochs=2):
    data = ArrayIterator(x, Y, nclass=3, shuffle=False)
    model.fit(data, GradientDescentMomentum(0.1, momentum_coef=0.9), model.epoch_index + epochs,
              GeneralizedCost(CrossEntropyMulti()), progress=False)
    return model


# ---- before initializing ---------------------------------------------------------------------
@pytest.mark.parametrize("call", ["fprop", "bprop"])
def test_fprop_or_bprop_before_initializing_says_to_initialize(backend, call):
    model = classifier()
    with pytest.raises(RuntimeError, match=f"^{call}: the model has no parameters yet; call "
                                           r"model.initialize\(dataset\)"):
        getattr(model, call)(backend.array(X[:8]))


def test_a_layer_or_a_training_step_before_initializing_says_to_initialize(backend):
    model = classifier()
    with pytest.raises(RuntimeError, match=r"^layer 'Affine_0' \(Affine\): fprop before the "
                                           r"layer was configured"):
        model.layers.layers[0].fprop(backend.array(X[:8]))
    with pytest.raises(RuntimeError, match=r"^the model: fprop before the layer was configured"):
        model.train_step(backend.array(X[:8]), backend.array(np.eye(3)[Y[:8]]),
                         GradientDescentMomentum(0.1), 0)


# ---- a first layer without parameters --------------------------------------------------------
FIRST_LAYERS = {
    "Activation(Rectlin)": (lambda: Activation(Rectlin()), (5,)),
    "Activation(Tanh)": (lambda: Activation(Tanh()), (5,)),
    "Activation(Gelu)": (lambda: Activation(Gelu()), (5,)),
    "Dropout": (lambda: Dropout(keep=0.8), (5,)),
    "Pooling": (lambda: Pooling(2), (4, 4, 2)),
    "LRN": (lambda: LRN(depth=3), (4, 4, 2)),
    "BatchNorm": (lambda: BatchNorm(), (5,)),
    "LayerNorm": (lambda: LayerNorm(), (5,)),
}


@pytest.mark.parametrize("kind", list(FIRST_LAYERS))
def test_a_model_whose_first_layer_has_no_parameters_trains(kind):
    make, shape = FIRST_LAYERS[kind]
    layers = [make()] + ([Flatten()] if len(shape) > 1 else [])
    model = Model(layers + [Affine(nout=3, init=Gaussian(), activation=Softmax())])
    x = RNG.random((32,) + shape).astype(np.float32)
    train(model, x, epochs=1)
    assert model.step_index == 4
    assert np.isfinite(model.predict(x)).all()


# ---- one layer, two models -------------------------------------------------------------------
def test_a_layer_in_a_second_model_is_refused_and_the_first_keeps_working():
    first = train(classifier("first"))
    before = first.predict(X)
    with pytest.raises(ConfigError, match=r"layer 'Affine_0' \(Affine\) already belongs to "
                                          r"model 'first'"):
        Model([first.layers.layers[0]])
    np.testing.assert_array_equal(first.predict(X), before)
    train(first, epochs=1)


def test_a_layer_twice_in_one_model_is_refused():
    layer = Activation(Tanh())
    with pytest.raises(ConfigError, match="appears twice in model"):
        Model([layer, Affine(nout=5, init=Gaussian()), layer])


def test_a_layer_of_a_model_that_is_gone_may_be_used_again():
    layer = Affine(nout=3, init=Gaussian(), activation=Softmax())
    train(Model([layer]))
    gc.collect()
    train(Model([layer]))


# ---- set_params ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex64])
def test_set_params_refuses_arrays_that_are_not_floating_point(dtype):
    model = train(classifier())
    before = model.get_params()
    bad = {key: value.astype(dtype) for key, value in before.items()}
    with pytest.raises(TypeError, match=r"set_params: parameter 'Affine_0.W' is floating-point "
                                        rf"\(float32\); got an array of dtype {np.dtype(dtype)}"):
        model.set_params(bad)
    for key, value in model.get_params().items():
        np.testing.assert_array_equal(value, before[key])


def test_set_params_converts_floats_and_refuses_values_the_dtype_cannot_hold():
    model = train(classifier())
    wide = {key: value.astype(np.float64) for key, value in model.get_params().items()}
    model.set_params(wide)
    for key, value in model.get_params().items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, wide[key].astype(np.float32))
    wide["Affine_1.W"] = wide["Affine_1.W"] * 0 + 1e300
    with pytest.raises(ValueError, match="'Affine_1.W': values beyond the range of float32"):
        model.set_params(wide)


# ---- a backend made after training -----------------------------------------------------------
@pytest.mark.parametrize("change", [{"datatype": np.float64}, {"batch_size": 4}])
def test_predict_after_a_backend_of_other_settings_is_refused_in_one_line(change):
    from neonlite.model_checks import BackendChanged
    model = train(classifier())
    expected = model.predict(X)
    gen_backend("cpu", **{"batch_size": 8, "rng_seed": 0, **change})
    with pytest.raises(BackendChanged, match=r"initialized on backend cpu \(batch 8, float32\), "
                                             r"but the current backend is cpu"):
        model.predict(X)
    moved = copy.deepcopy(model)
    np.testing.assert_allclose(moved.predict(X), expected, rtol=1e-5, atol=1e-6)


def test_predict_after_a_backend_of_the_same_settings_works():
    model = train(classifier())
    expected = model.predict(X)
    gen_backend("cpu", batch_size=8, rng_seed=1)
    np.testing.assert_array_equal(model.predict(X), expected)


# ---- pickle and deepcopy ---------------------------------------------------------------------
def _globals(data):
    """The (module, name) pairs a pickle would import."""
    found, strings = [], []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.append(tuple(strings[-2:]))
        elif op.name == "GLOBAL":
            found.append(tuple(arg.split(" ")))
    return found


def test_a_pickled_model_is_its_checkpoint_and_unpickles_to_equal_outputs(tmp_path):
    model = train(classifier("net"))
    data = pickle.dumps(model)
    assert _globals(data) == [("neonlite.model", "_rebuild_model")]
    assert b"\x89HDF\r\n\x1a\n" in data
    again = pickle.loads(data)
    assert again is not model and again.name == "net"
    assert (again.epoch_index, again.step_index) == (model.epoch_index, model.step_index)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def test_deepcopy_is_an_independent_model_with_equal_outputs():
    model = train(classifier())
    twin = copy.deepcopy(model)
    np.testing.assert_array_equal(twin.predict(X), model.predict(X))
    assert not {id(a) for a in twin.layers.leaves()} & {id(b) for b in model.layers.leaves()}
    before = model.predict(X)
    train(twin, epochs=1)
    np.testing.assert_array_equal(model.predict(X), before)
    assert not np.array_equal(twin.predict(X), before)


def test_an_uninitialized_model_pickles_as_its_description():
    model = classifier()
    again = pickle.loads(pickle.dumps(model))
    assert again.in_shape is None
    assert again.get_description() == model.get_description()
    train(again, epochs=1)


@pytest.mark.parametrize("damage", ["weights changed", "not HDF5"])
def test_a_pickle_with_other_bytes_is_refused_not_run(damage):
    from neonlite.serialize import CheckpointError
    model = train(classifier())
    data = pickle.dumps(model)
    if damage == "weights changed":
        weights = model.get_params()["Affine_1.W"].tobytes()
        assert data.count(weights) == 1
        damaged = data.replace(weights, bytes(len(weights)))
        words = "checksum mismatch"
    else:
        start = data.index(b"\x89HDF")
        damaged = data[:start] + b"x" * 512 + data[start + 512:]
        words = "not a readable HDF5 file"
    with pytest.raises(CheckpointError, match=words):
        pickle.loads(damaged)
