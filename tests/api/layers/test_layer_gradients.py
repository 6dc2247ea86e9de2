"""Finite-difference gradient checks (float64, CPU) of every core layer, activation and cost
(SmoothL1Loss also against PyTorch's value)."""
import numpy as np
import pytest
from support.harness import build, cost_gradient_check, gradient_check

import neonlite
from neonlite.initializers import Gaussian
from neonlite.layers import (Activation, Affine, BatchNorm, Bias, Conv, Convolution, Dropout,
                             Flatten, GeneralizedCost, Linear, MergeSum, Pooling, Reshape,
                             SkipNode)
from neonlite.transforms import (CrossEntropyBinary, CrossEntropyMulti, Gelu, Identity, Logistic,
                                 MeanSquared, Rectlin, SmoothL1Loss, Softmax, SumSquared,
                                 Tanh)


def away_from_zero(rng, shape):
    """Standard-normal magnitudes pushed at least 0.1 away from 0 (ReLU's kink)."""
    x = rng.normal(size=shape)
    return np.sign(x) * (0.1 + np.abs(x))


def distinct(rng, shape):
    """Values 0.05 apart in random order: no ties for max pooling to break."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) - np.prod(shape) / 2) * 0.05


# ---- linear layers ------------------------------------------------------------------------------
def test_linear_flattens_non_batch_axes():
    net = gradient_check(lambda: Linear(5, init=Gaussian(scale=0.5)), (2, 3, 2))
    assert net.layers[0].out_shape == (5,)


def test_linear_per_token_sequence():
    net = gradient_check(lambda: Linear(3, init=Gaussian(scale=0.5)), (4, 5), batch=2)
    assert net.layers[0].out_shape == (4, 3)


@pytest.mark.parametrize("in_shape", [(6,), (3, 2, 4)])
def test_bias(in_shape):
    gradient_check(lambda: Bias(), in_shape)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_affine(batch_norm):
    gradient_check(lambda: Affine(4, init=Gaussian(scale=0.5), activation=Tanh(),
                                  batch_norm=batch_norm), (3, 2), batch=5)


# ---- convolution and pooling --------------------------------------------------------------------
CONV_CASES = {
    "stride2": dict(fshape=(3, 3, 4), strides=2, padding=0, dilation=1),
    "pad1": dict(fshape=(3, 3, 4), strides=1, padding=1, dilation=1),
    "dilation2": dict(fshape=(2, 3, 2), strides=1, padding=(1, 0), dilation=2),
    "all": dict(fshape=(3, 2, 3), strides=(2, 1), padding=(1, 2), dilation=(2, 1)),
    "pointwise": dict(fshape=(1, 1, 3), strides=1, padding=0, dilation=1),
    "stride_gt_filter": dict(fshape=(1, 2, 2), strides=3, padding=1, dilation=1),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_convolution(case):
    kw = CONV_CASES[case]
    gradient_check(lambda: Convolution(kw["fshape"], kw["strides"], kw["padding"], kw["dilation"],
                                       init=Gaussian(scale=0.3)), (7, 5, 3), batch=2)


def test_conv_compound_with_bias_and_activation():
    net = gradient_check(lambda: Conv((3, 3, 2), strides=2, padding=1, init=Gaussian(scale=0.3),
                                      activation=Rectlin()), (5, 6, 3), batch=2,
                         make_input=away_from_zero)
    assert sorted(p.attr for p in net.parameters()) == ["W", "b"]


@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("fshape,strides,padding", [(3, 2, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 0)),
                                                    (2, None, 0)])
def test_pooling(op, fshape, strides, padding):
    gradient_check(lambda: Pooling(fshape, strides=strides, padding=padding, op=op), (6, 5, 2),
                   batch=2, make_input=distinct)


# ---- normalization, activations, dropout, reshapes ----------------------------------------------
@pytest.mark.parametrize("in_shape,batch", [((3, 4, 2), 2), ((5,), 6)])
def test_batchnorm_training(in_shape, batch):
    net = gradient_check(lambda: BatchNorm(), in_shape, batch=batch, perturb_params=0.3)
    bn = net.layers[0]
    assert not np.allclose(bn.running_mean.get(), 0.0), "training must update running_mean"


ACTIVATIONS = {"rectlin": Rectlin(), "leaky": Rectlin(slope=0.2), "logistic": Logistic(),
               "tanh": Tanh(), "softmax": Softmax(), "identity": Identity(), "gelu": Gelu(),
               "gelu_tanh": Gelu(approximate="tanh")}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name):
    gradient_check(lambda: Activation(ACTIVATIONS[name]), (2, 5), make_input=away_from_zero)


def test_softmax_acts_over_last_axis_of_sequences():
    net = gradient_check(lambda: Activation(Softmax()), (3, 4), batch=2)
    y = net.layers[0].outputs.get()
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-12)


def test_dropout_fixed_mask():
    def fix(net):
        net.layers[0].fixed_mask = True

    net = gradient_check(lambda: Dropout(keep=0.6), (4, 5), batch=3, before_check=fix)
    mask = net.layers[0].mask.get()
    assert set(np.unique(mask)) == {0.0, 1.0 / 0.6}


@pytest.mark.parametrize("make", [lambda: Flatten(), lambda: Reshape((6, -1))])
def test_flatten_reshape(make):
    gradient_check(make, (3, 2, 2))


# ---- residual blocks ----------------------------------------------------------------------------
def _conv(nout, **kw):
    return Convolution((3, 3, nout), padding=1, init=Gaussian(scale=0.3), **kw)


def test_residual_block_identity_shortcut():
    def block():
        return MergeSum([[_conv(3), BatchNorm(), Activation(Rectlin()), _conv(3)], [SkipNode()]])
    net = gradient_check(block, (4, 4, 3), batch=2, seed=3)
    assert len(net.parameters()) == 4


def test_residual_block_projection_shortcut():
    def block():
        return MergeSum([[_conv(4, strides=2), BatchNorm(), Activation(Tanh()), _conv(4)],
                         [Convolution((1, 1, 4), strides=2, init=Gaussian(scale=0.3)),
                          BatchNorm()]])
    net = gradient_check(block, (5, 4, 2), batch=2)
    assert net.out_shape == (3, 2, 4)


# ---- costs --------------------------------------------------------------------------------------
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


@pytest.mark.parametrize("make,in_shape", [
    (lambda: Linear(3), (4,)), (lambda: Bias(), (2, 3)), (lambda: BatchNorm(), (2, 2, 3)),
    (lambda: Convolution((2, 2, 3), padding=1), (3, 3, 2)),
    (lambda: Affine(3, batch_norm=True), (4,))])
def test_bprop_accumulates_parameter_gradients(make, in_shape):
    """bprop adds into Parameter.grad (the model zeroes it once per step)."""
    be = neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float64)
    net = build(make(), in_shape)
    rng = np.random.default_rng(0)
    x = be.array(rng.normal(size=(3,) + in_shape))
    for p in net.parameters():
        p.grad[:] = 0.0
    y = net.fprop(x)
    w = be.array(rng.normal(size=y.shape))
    net.bprop(w)
    once = [p.grad.get() for p in net.parameters()]
    net.fprop(x)
    net.bprop(w)
    for p, g in zip(net.parameters(), once):
        assert np.abs(g).max() > 0
        np.testing.assert_allclose(p.grad.get(), 2 * g, rtol=1e-12, err_msg=p.name)


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
