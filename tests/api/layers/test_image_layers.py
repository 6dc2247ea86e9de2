"""The image layers Deconv (transposed convolution), MergeBroadcast and LRN: float64
finite-difference gradient checks, float64 parity with PyTorch (ConvTranspose2d,
LocalResponseNorm), and one clear error for bad shapes.  The LRN
kernels against the numpy reference are rows of ``tests/backend/test_op_table.py``."""
import numpy as np
import pytest
from support.harness import build, gradient_check

import neonlite
from neonlite.layers import (LRN, Conv, Deconv, Deconvolution, MergeBroadcast, Pooling,
                             ShapeError, SkipNode)
from neonlite.transforms import Logistic, Rectlin, Tanh

DECONV_CASES = [((4, 5, 3), (3, 3, 2), 2, 1, 1), ((3, 3, 2), (2, 2, 4), 1, 0, 0),
                ((5, 4, 3), (3, 2, 3), 3, 1, 2), ((3, 4, 2), (4, 4, 2), (2, 1), (1, 0), (1, 0))]


@pytest.mark.parametrize("in_shape,fshape,stride,pad,extra", DECONV_CASES)
def test_deconv_gradients(in_shape, fshape, stride, pad, extra):
    gradient_check(lambda: Deconv(fshape, strides=stride, padding=pad, output_padding=extra,
                                  activation=Rectlin(0.1)), in_shape, batch=2, atol=1e-8)


@pytest.mark.parametrize("activation", [Logistic(), Tanh(), None])
def test_deconv_fused_bias_and_activation(activation):
    net = gradient_check(lambda: Deconv((3, 3, 2), strides=2, padding=1, output_padding=1,
                                        activation=activation), (3, 3, 2), batch=2, atol=1e-8)
    core = net.layers[0]
    assert len(net.layers) == 1 and core.b is not None
    be = neonlite.get_backend()
    x = be.array(np.random.default_rng(9).normal(size=(2, 3, 3, 2)))
    unfused = build(Deconvolution((3, 3, 2), strides=2, padding=1, output_padding=1),
                    (3, 3, 2))
    unfused.layers[0].W.value[:] = core.W.value
    b = core.b.value.get().reshape(1, 1, 1, -1)
    pre = unfused.fprop(x).get() + b
    want = {None: pre, "Logistic": 1 / (1 + np.exp(-pre)), "Tanh": np.tanh(pre)}
    np.testing.assert_allclose(net.fprop(x).get(),
                               want[type(activation).__name__ if activation else None],
                               rtol=1e-12)


@pytest.mark.parametrize("in_shape,fshape,stride,pad,extra", DECONV_CASES)
def test_deconv_matches_pytorch_conv_transpose(in_shape, fshape, stride, pad, extra):
    torch = pytest.importorskip("torch", reason="PyTorch is needed for the parity test")
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    net = build(Deconvolution(fshape, strides=stride, padding=pad, output_padding=extra),
                in_shape)
    layer = net.layers[0]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2,) + in_shape)
    y = net.fprop(be.array(x)).get()
    w = rng.normal(size=y.shape)
    layer.W.grad[:] = 0.0
    dx = net.bprop(be.array(w)).get()
    module = torch.nn.ConvTranspose2d(in_shape[2], fshape[2], fshape[:2], stride=stride,
                                      padding=pad, output_padding=extra, bias=False).double()
    with torch.no_grad():
        module.weight.copy_(torch.tensor(layer.W.value.get().transpose(3, 2, 0, 1)))
    xt = torch.tensor(x.transpose(0, 3, 1, 2), requires_grad=True)
    yt = module(xt)
    (yt * torch.tensor(w.transpose(0, 3, 1, 2))).sum().backward()
    np.testing.assert_allclose(y, yt.detach().numpy().transpose(0, 2, 3, 1), rtol=0, atol=1e-10)
    np.testing.assert_allclose(dx, xt.grad.numpy().transpose(0, 2, 3, 1), rtol=0, atol=1e-10)
    np.testing.assert_allclose(layer.W.grad.get(), module.weight.grad.numpy().transpose(2, 3, 1, 0),
                               rtol=0, atol=1e-10)


def test_deconv_output_padding_must_be_below_the_stride():
    neonlite.gen_backend("cpu", batch_size=2)
    with pytest.raises(ValueError, match=r"layer 'Deconvolution_0' \(Deconvolution\): "
                                         r"output_padding must be in \[0, stride\) on each axis, "
                                         r"got 2 with stride 2"):
        build(Deconvolution((3, 3, 4), strides=2, output_padding=2), (4, 4, 3))


def test_merge_broadcast_gradients_concat_and_sum():
    def inception():
        return MergeBroadcast([[Conv((1, 1, 2), activation=Rectlin())],
                               [Conv((3, 3, 3), padding=1)],
                               [Pooling(3, strides=1, padding=1, op="max"),
                                Conv((1, 1, 1))]], merge="concat")
    net = gradient_check(inception, (4, 4, 3), batch=2, atol=1e-8)
    assert net.layers[0].out_shape == (4, 4, 6)
    gradient_check(lambda: MergeBroadcast([[Conv((3, 3, 3), padding=1)], [SkipNode()]],
                                          merge="sum"), (3, 3, 3), batch=2, atol=1e-8)


def test_merge_broadcast_names_both_branches_and_shapes():
    neonlite.gen_backend("cpu", batch_size=2)
    merge = MergeBroadcast([[Conv((3, 3, 4))], [Conv((1, 1, 2))]], name="incep")
    with pytest.raises(ShapeError, match=r"layer 'incep' \(MergeBroadcast\): cannot concatenate "
                                         r"along the last axis: branch 'incep.branch0' gives "
                                         r"\(4, 4, 4\) and branch 'incep.branch1' gives "
                                         r"\(6, 6, 2\)"):
        build(merge, (6, 6, 3))


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_lrn_gradients(depth):
    gradient_check(lambda: LRN(depth, alpha=0.5, beta=0.75, k=2.0), (3, 2, 7), batch=2,
                   atol=1e-9)


def test_lrn_matches_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is needed for the parity test")
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    net = build(LRN(5, alpha=0.3, beta=0.75, k=1.5), (3, 4, 9))
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(2, 3, 4, 9)), rng.normal(size=(2, 3, 4, 9))
    y = net.fprop(be.array(x)).get()
    dx = net.bprop(be.array(w)).get()
    xt = torch.tensor(x.transpose(0, 3, 1, 2), requires_grad=True)
    yt = torch.nn.LocalResponseNorm(5, alpha=0.3, beta=0.75, k=1.5)(xt)
    (yt * torch.tensor(w.transpose(0, 3, 1, 2))).sum().backward()
    np.testing.assert_allclose(y, yt.detach().numpy().transpose(0, 2, 3, 1), rtol=0, atol=1e-10)
    np.testing.assert_allclose(dx, xt.grad.numpy().transpose(0, 2, 3, 1), rtol=0, atol=1e-10)
