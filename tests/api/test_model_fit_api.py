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
