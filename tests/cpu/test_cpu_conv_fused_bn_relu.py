"""Batch norm fused with the ReLU that follows it (``Conv``/``Affine`` with
``batch_norm=True, activation=Rectlin()``): the C kernels, the numpy fallback and the layer
against batch norm followed by a separate ReLU, and float64 gradient checks of the fused layer.
"""
import numpy as np
import pytest
from support.harness import build, gradient_check

import neonlite
from neonlite.backends.reference import norm as numpy_norm
from neonlite.initializers import Gaussian
from neonlite.layers import Activation, Affine, BatchNorm, Conv, Convolution, Sequential
from neonlite.transforms import Rectlin, Tanh

DTYPES = (np.float32, np.float64)


def _bn_then_relu(x, p, inference, dy):
    """numpy reference: batch norm, ReLU, and the backward of both (dy masked by y > 0)."""
    M, C = x.shape
    y, xhat = np.empty_like(x), np.empty_like(x)
    mean, invstd = np.empty((1, C), x.dtype), np.empty((1, C), x.dtype)
    rm, rv = p["rm"].copy(), p["rv"].copy()
    numpy_norm.batchnorm_fprop(x, p["gamma"], p["beta"], y, xhat, mean, invstd, rm, rv, 1e-5,
                               0.9, inference)
    np.maximum(y, 0, out=y)
    dx, dg, db = np.empty_like(x), np.zeros((1, C), x.dtype), np.zeros((1, C), x.dtype)
    numpy_norm.batchnorm_bprop(dy * (y > 0), xhat, invstd, p["gamma"], dx, dg, db)
    return [y, xhat, mean, invstd, rm, rv, dx, dg, db]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,C", [(1, 3), (37, 5), (3000, 17)])
@pytest.mark.parametrize("inference", [False, True])
@pytest.mark.parametrize("impl", ["c", "numpy-fallback"])
def test_fused_batchnorm_relu_matches_bn_then_relu(monkeypatch, dtype, M, C, inference, impl):
    if impl == "numpy-fallback":
        monkeypatch.setenv("NEONLITE_CPU_KERNELS", "0")
    be = neonlite.gen_backend("cpu", batch_size=1, datatype=dtype)
    if impl == "c" and not be.kernels.active(dtype):
        pytest.skip(f"the C kernels are not built here: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((M, C)) * 2).astype(dtype)
    p = {"gamma": rng.standard_normal((1, C)).astype(dtype) + 0.5,
         "beta": rng.standard_normal((1, C)).astype(dtype),
         "rm": rng.standard_normal((1, C)).astype(dtype),
         "rv": np.abs(rng.standard_normal((1, C))).astype(dtype) + 0.5}
    dy = rng.standard_normal((M, C)).astype(dtype)
    want = _bn_then_relu(x, p, inference, dy)
    t = {k: be.array(v, dtype=dtype) for k, v in p.items()}
    y, xhat = be.empty((M, C)), be.empty((M, C))
    mean, invstd = be.empty((1, C)), be.empty((1, C))
    be.batchnorm_fprop(be.array(x), t["gamma"], t["beta"], y, xhat, mean, invstd, t["rm"],
                       t["rv"], 1e-5, 0.9, inference, relu=True)
    dx, dg, db = be.empty((M, C)), be.zeros((1, C)), be.zeros((1, C))
    be.batchnorm_bprop(be.array(dy), xhat, invstd, t["gamma"], dx, dg, db, y=y)
    got = [y, xhat, mean, invstd, t["rm"], t["rv"], dx, dg, db]
    tol = {np.float32: 2e-4 if M > 1 else 2e-5, np.float64: 1e-9}[dtype]
    for name, g, w in zip("y xhat mean invstd rm rv dx dgamma dbeta".split(), got, want):
        np.testing.assert_allclose(g.get(), w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()),
                                   err_msg=name)
    assert (y.get() >= 0).all()


def test_conv_and_affine_fuse_a_plain_relu_only():
    conv = Conv((3, 3, 4), padding=1, batch_norm=True, activation=Rectlin())
    assert [type(layer) for layer in conv.layers] == [Convolution, BatchNorm]
    assert isinstance(conv.layers[1].activation, Rectlin)
    assert isinstance(conv.activation, Rectlin)
    leaky = Affine(3, batch_norm=True, activation=Rectlin(slope=0.1))
    assert isinstance(leaky.layers[-1], Activation) and leaky.layers[1].activation is None
    with pytest.raises(ValueError, match="plain ReLU"):
        BatchNorm(activation=Tanh())


def test_fused_layer_equals_batchnorm_then_activation():
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(8)
    fused = build(Conv((3, 3, 5), padding=1, batch_norm=True, activation=Rectlin()), (6, 5, 3))
    plain = build(Sequential([Convolution((3, 3, 5), padding=1), BatchNorm(),
                              Activation(Rectlin())]), (6, 5, 3))
    for a, b in zip(fused.parameters(), plain.parameters()):
        a.value.set(rng.normal(size=a.value.shape))
        b.value.set(a.value.get())
    x = be.array(rng.normal(size=(4, 6, 5, 3)))
    e = be.array(rng.normal(size=(4, 6, 5, 5)))
    for net in (fused, plain):
        for p in net.parameters():
            p.grad[:] = 0.0
    np.testing.assert_allclose(fused.fprop(x).get(), plain.fprop(x).get(), rtol=1e-12)
    np.testing.assert_allclose(fused.bprop(e).get(), plain.bprop(e).get(), rtol=1e-10,
                               atol=1e-12)
    for a, b in zip(fused.parameters(), plain.parameters()):
        np.testing.assert_allclose(a.grad.get(), b.grad.get(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make,in_shape", [
    (lambda: Conv((3, 3, 4), padding=1, init=Gaussian(scale=0.5), batch_norm=True,
                  activation=Rectlin()), (5, 4, 3)),
    (lambda: Affine(4, init=Gaussian(scale=0.5), batch_norm=True, activation=Rectlin()), (6,))])
def test_fused_batchnorm_relu_gradients(make, in_shape):
    gradient_check(make, in_shape, batch=5)
