"""Finite-difference gradient checks (float64, CPU) of every core layer and activation, and
bprop adding into the parameters' gradients.  The costs' checks are in
``tests/api/costs/test_cost_gradients.py``."""
import numpy as np
import pytest
from support.harness import build, gradient_check

import neonlite
from neonlite.initializers import Gaussian
from neonlite.layers import (Activation, Affine, BatchNorm, Bias, Conv, Convolution, Dropout,
                             Flatten, Linear, MergeSum, Pooling, Reshape, SkipNode)
from neonlite.transforms import Gelu, Identity, Logistic, Rectlin, Softmax, Tanh


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
