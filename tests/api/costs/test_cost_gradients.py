"""Finite-difference gradient checks (float64, CPU) of every cost, alone and fused with the
activation before it (CrossEntropyMulti with Softmax, CrossEntropyBinary with Logistic); every
cost is a mean over the batch; SmoothL1Loss also against PyTorch's value.  Outputs and targets
are (N, ...) with the classes on the last axis."""
import numpy as np
import pytest
from support.harness import cost_gradient_check

import neonlite
from neonlite.layers import GeneralizedCost
from neonlite.transforms import (CrossEntropyBinary, CrossEntropyMulti, Logistic, MeanSquared,
                                 SmoothL1Loss, Softmax, SumSquared)


def one_hot(rng, shape):
    t = np.zeros(shape)
    flat = t.reshape(-1, shape[-1])
    flat[np.arange(len(flat)), rng.integers(0, shape[-1], len(flat))] = 1.0
    return t


def probabilities(rng, shape):
    e = np.exp(rng.normal(size=shape))
    return e / e.sum(axis=-1, keepdims=True)


def unit_interval(rng, shape):
    return rng.uniform(0.1, 0.9, size=shape)


@pytest.mark.parametrize("out_shape", [(5,), (3, 4)])
def test_cross_entropy_multi_plain(out_shape):
    cost = cost_gradient_check(CrossEntropyMulti(), out_shape, one_hot, make_input=probabilities)
    assert cost.fused_layer is None


@pytest.mark.parametrize("out_shape", [(5,), (3, 4)])
def test_cross_entropy_multi_fused_with_softmax(out_shape):
    cost = cost_gradient_check(CrossEntropyMulti(), out_shape, one_hot, activation=Softmax())
    assert cost.fused_layer is not None, "CrossEntropyMulti after Softmax must take the fused path"


def test_cross_entropy_multi_soft_targets_fused():
    cost_gradient_check(CrossEntropyMulti(), (4,), probabilities, activation=Softmax())


def test_cross_entropy_binary_plain():
    cost = cost_gradient_check(CrossEntropyBinary(), (3,), unit_interval, make_input=unit_interval)
    assert cost.fused_layer is None


def test_cross_entropy_binary_fused_with_logistic():
    cost = cost_gradient_check(CrossEntropyBinary(), (3,), unit_interval, activation=Logistic())
    assert cost.fused_layer is not None


@pytest.mark.parametrize("costfunc", [SumSquared(), MeanSquared()], ids=["sum", "mean"])
@pytest.mark.parametrize("out_shape", [(3,), (2, 3)])
def test_squared_costs(costfunc, out_shape):
    cost_gradient_check(costfunc, out_shape, lambda rng, s: rng.normal(size=s))


def test_cost_is_mean_over_batch():
    """Doubling the batch with the same rows leaves every cost unchanged."""
    rng = np.random.default_rng(0)
    y, t = probabilities(rng, (3, 4)), one_hot(rng, (3, 4))
    for costfunc in (CrossEntropyMulti(), CrossEntropyBinary(), SumSquared(), MeanSquared()):
        values = []
        for reps in (1, 2):
            be = neonlite.gen_backend("cpu", batch_size=3 * reps, datatype=np.float64)
            cost = GeneralizedCost(costfunc)
            cost.initialize(None, (4,), be)
            yt, tt = be.array(np.tile(y, (reps, 1))), be.array(np.tile(t, (reps, 1)))
            values.append(cost.cost(yt, tt))
        np.testing.assert_allclose(values[0], values[1], rtol=1e-12, err_msg=repr(costfunc))
    expected = -np.mean(np.sum(t * np.log(y), axis=1))
    be = neonlite.gen_backend("cpu", batch_size=3, datatype=np.float64)
    cost = GeneralizedCost(CrossEntropyMulti())
    cost.initialize(None, (4,), be)
    np.testing.assert_allclose(cost.cost(be.array(y), be.array(t)), expected, rtol=1e-12)


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_smooth_l1_gradient_and_pytorch_value(beta):
    cost = cost_gradient_check(SmoothL1Loss(beta), (5,), lambda rng, s: rng.normal(size=s),
                               make_input=lambda rng, s: 2 * rng.normal(size=s))
    torch = pytest.importorskip("torch", reason="PyTorch is needed for the parity check")
    be = neonlite.get_backend()
    rng = np.random.default_rng(5)
    y, t = rng.normal(size=(4, 5)) * 2, rng.normal(size=(4, 5))
    got = cost.costfunc.cost(be, be.array(y), be.array(t), be.zeros((1, 1)))
    want = torch.nn.SmoothL1Loss(beta=beta)(torch.tensor(y), torch.tensor(t)).item()
    assert abs(got - want) < 1e-12
