"""The training loop's NaN/inf guard after a fused optimizer step: the fused kernel reports
whether every weight and state value it wrote is finite, so later steps need no pass of their
own over the arena, and a step that makes a weight or a state non-finite still stops the run
at that step, before anything can be saved."""
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.callbacks import Callbacks, FunctionCallback
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import Adam, GradientDescentMomentum, RMSProp
from neonlite.backends.cpu.arena import ParameterArena
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax


def _model():
    be = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    if not be.kernels.active(be.dtype):
        pytest.skip(f"the C kernels are unavailable: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(48, 5)), rng.integers(0, 3, 48), nclass=3)
    return Model([Affine(6, activation=Rectlin()), Affine(3, activation=Softmax())]), data


OPTIMIZERS = {"momentum": lambda: GradientDescentMomentum(0.1, momentum_coef=0.9),
              "adam": lambda: Adam(1e-2), "rmsprop": lambda: RMSProp(1e-2)}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_step_that_makes_a_weight_infinite_stops_at_that_step(name):
    model, data = _model()
    optimizer = OPTIMIZERS[name]()

    def blow_up(epoch, batch, cost):
        if batch == 2:  # the fourth update (batch index 3) overflows every weight it moves
            optimizer.learning_rate = 1e45

    callbacks = Callbacks(model, progress=False, divergence_guard=False)
    callbacks.add(FunctionCallback(on_minibatch_end=blow_up))
    with pytest.raises(FloatingPointError, match="NaN or inf in the update at epoch 1, batch 4"):
        model.fit(data, optimizer, 1, GeneralizedCost(CrossEntropyMulti()), callbacks=callbacks)
    assert not optimizer.updated_finite(model.parameters())
    assert model.first_nonfinite() is not None


def test_steps_after_the_first_take_the_fused_pass_at_its_word(monkeypatch):
    """Only the run's first step reads the arena for the check; the later ones use what the
    fused update saw, and the weights they leave are finite."""
    model, data = _model()
    reads = []
    original = ParameterArena.all_finite
    monkeypatch.setattr(ParameterArena, "all_finite",
                        lambda self, states=False: reads.append(1) or original(self, states))
    optimizer = Adam(1e-2)
    model.fit(data, optimizer, 2, GeneralizedCost(CrossEntropyMulti()), progress=False)
    assert len(reads) == 1
    assert optimizer.updated_finite(model.parameters())
    assert model.first_nonfinite() is None


def test_the_fused_kernel_says_when_it_wrote_a_nan():
    """A NaN gradient element makes the fused pass report a non-finite write; the next clean
    step of fresh parameters reports none."""
    model, data = _model()
    optimizer = Adam(1e-2)
    model.fit(data, optimizer, 1, GeneralizedCost(CrossEntropyMulti()), progress=False)
    params = model.parameters()
    model.zero_grads()
    optimizer.optimize(params, 0)
    assert optimizer.updated_finite(params)
    params[0].grad[0:1] = params[0].grad[0:1] * np.nan
    optimizer.optimize(params, 0)
    assert not optimizer.updated_finite(params)
    assert not optimizer.updated_finite(params[1:])
