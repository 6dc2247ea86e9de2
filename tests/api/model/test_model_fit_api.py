"""Model.fit/predict/eval/load as a newcomer from Keras or PyTorch meets them: a fit with
nothing to do says so, fit shows progress unless told not to, predict takes an array or a
data set, eval without a metric uses the configured one, and load works before gen_backend."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.initializers import GlorotUniform
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import (CrossEntropyMulti, Identity, Misclassification, NatsPerToken,
                                 Rectlin, Softmax, SumSquared)


@pytest.fixture
def trained(tmp_path):
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 6)).astype(np.float32)
    y = rng.integers(0, 3, 20)
    data = ArrayIterator(X, y, nclass=3, shuffle=False)
    model = Model([Affine(nout=8, init=GlorotUniform(), activation=Rectlin()),
                   Affine(nout=3, init=GlorotUniform(), activation=Softmax())])
    model.fit(data, GradientDescentMomentum(0.1), num_epochs=1,
              cost=GeneralizedCost(CrossEntropyMulti()), progress=False)
    return model, data, X, y


def test_a_fit_with_nothing_to_do_warns_with_the_number_to_pass(trained):
    model, data, _, _ = trained
    with pytest.warns(UserWarning, match=r"epoch_index is 1.*num_epochs=2"):
        model.fit(data, model.optimizer, num_epochs=1, cost=model.cost, progress=False)
    assert model.epoch_index == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(data, model.optimizer, num_epochs=2, cost=model.cost, progress=False)
    assert model.epoch_index == 2


def test_fit_shows_progress_by_default_and_progress_false_silences_it(trained, capsys):
    model, data, _, _ = trained
    capsys.readouterr()
    model.fit(data, model.optimizer, num_epochs=2, cost=model.cost)
    assert "epoch 2/2: mean train cost" in capsys.readouterr().err
    model.fit(data, model.optimizer, num_epochs=3, cost=model.cost, progress=False)
    assert capsys.readouterr().err == ""


def test_predict_takes_an_array_or_a_data_set(trained):
    model, data, X, _ = trained
    from_array = model.predict(X)
    assert from_array.shape == (20, 3)
    np.testing.assert_array_equal(from_array, model.get_outputs(data))
    np.testing.assert_array_equal(model.predict(data), from_array)
    np.testing.assert_allclose(from_array.sum(axis=1), 1.0, rtol=1e-5)


def test_eval_without_a_metric_uses_the_configured_one_or_misclassification(trained):
    model, data, _, _ = trained
    assert model.eval(data) == model.eval(data, Misclassification())
    model.metric = NatsPerToken()
    assert model.eval(data) == model.eval(data, NatsPerToken())


def test_eval_of_a_regressor_without_a_metric_says_what_to_pass():
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    X = np.ones((8, 3), np.float32)
    data = ArrayIterator(X, X, shuffle=False)
    model = Model([Affine(nout=3, activation=Identity())])
    model.fit(data, GradientDescentMomentum(0.1), 1, GeneralizedCost(SumSquared()),
              progress=False)
    with pytest.raises(ValueError, match=r"model.eval\(dataset, metric\)"):
        model.eval(data)


def test_load_before_gen_backend_makes_the_checkpoint_backend(trained, tmp_path):
    model, _, X, _ = trained
    path = tmp_path / "m.h5"
    model.save(path)
    script = ("import sys, numpy as np; from neonlite import Model; "
              f"m = Model.load({str(path)!r}); "
              "print(m.be.name, m.be.bsz, m.predict(np.load(sys.argv[1])).argmax(1).tolist())")
    np.save(tmp_path / "x.npy", X)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.npy")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["cpu", "8"]
    assert done.stdout.split(None, 2)[2].strip() == str(model.predict(X).argmax(1).tolist())


def _keras_net():
    return Model([Affine(nout=8, init=GlorotUniform(), activation=Rectlin()),
                  Affine(nout=3, init=GlorotUniform(), activation=Softmax())])


def test_fit_takes_arrays_with_a_keras_validation_split():
    """``fit(X, y=labels, validation_split=0.25)`` trains on the first 75% exactly as on a
    data set of them, and evaluates the last 25% after every epoch (``model.last_eval``)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    y = rng.integers(0, 3, 40)
    runs = []
    for keras in (True, False):
        neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
        model = _keras_net()
        cost, opt = GeneralizedCost(CrossEntropyMulti()), GradientDescentMomentum(0.1)
        if keras:
            model.fit(X, opt, num_epochs=2, cost=cost, progress=False, y=y,
                      validation_split=0.25)
        else:
            model.fit(ArrayIterator(X[:30], y[:30], nclass=3), opt, num_epochs=2, cost=cost,
                      progress=False)
        runs.append(model)
    keras_model, plain = runs
    for key, value in plain.get_params().items():
        np.testing.assert_array_equal(keras_model.get_params()[key], value, err_msg=key)
    name, value, epoch = keras_model.last_eval
    assert epoch == 1 and name == "misclassification"
    assert value == keras_model.eval(ArrayIterator(X[30:], y[30:], nclass=3),
                                     Misclassification())


@pytest.mark.parametrize("split", [0.0, 1.0, 1.5, "half", 0.95])
def test_a_validation_split_that_leaves_a_part_empty_is_one_error(split):
    from neonlite.data.iterator import DataError
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    X, y = np.zeros((10, 6), np.float32), np.zeros(10, np.int64)
    with pytest.raises(DataError, match="validation_split"):
        _keras_net().fit(X, GradientDescentMomentum(0.1), num_epochs=1,
                         cost=GeneralizedCost(CrossEntropyMulti()), y=y,
                         validation_split=split)
