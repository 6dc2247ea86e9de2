"""The convolution epilogue: ``fprop_conv(..., bias=b, relu=True)`` adds the bias and applies the
ReLU in the convolution's own pass, and ``Conv`` puts its bias and plain ReLU there.

Checked on every CPU kernel path (direct, tiled with MKL, whole-batch and per-image patches,
1x1 as a GEMM) and the numpy reference against conv + bias + max(., 0) written out here; on every
available backend against the CPU through the harness; and at the layer level against the
unfused chain Convolution -> Bias -> Activation(Rectlin()) with the same weights.
"""
import numpy as np
import pytest
from support.harness import compare_with_cpu, gradient_check

import neonlite
from neonlite.backends.cpu import conv as cpu_conv
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.conv import CPUConvPlan
from neonlite.backends.reference import conv as numpy_conv
from neonlite.backends.cpu.blas import GemmThreads
from neonlite.backends.cpu.mkl_blas import load_mkl
from neonlite.backends.plans import ConvPlan
from neonlite.initializers import Gaussian, Uniform
from neonlite.layers import Activation, Bias, Conv, Convolution, Sequential
from neonlite.transforms import Rectlin, Tanh

_NO_MKL = None if load_mkl() is not None else "MKL is not installed (pip install mkl)"

# (N, H, W, C, K, R, S, pad, stride); K = 16 or 32 lets the direct kernels take the 3x3 and 5x5
# cases, K = 5 forces the patch paths.
SHAPES = {
    "direct_3x3": (2, 7, 6, 3, 16, 3, 3, (1, 1), (1, 1)),
    "direct_5x5_batch1": (1, 9, 9, 1, 32, 5, 5, (2, 2), (1, 1)),
    "patches_strided": (3, 8, 7, 3, 5, 3, 2, (1, 0), (2, 1)),
    "pointwise": (2, 5, 4, 6, 5, 1, 1, (0, 0), (1, 1)),
}


def _reference(plan, x, f, bias, relu):
    """conv(x, f) + bias, then max(., 0) when relu, in float64."""
    out = np.empty(plan.out_shape, np.float64)
    numpy_conv.fprop_conv(plan, x.astype(np.float64), f.astype(np.float64), out)
    out += bias
    return np.maximum(out, 0) if relu else out


def _operands(case, dtype, seed=0):
    N, H, W, C, K, R, S, pad, stride = SHAPES[case]
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, H, W, C)).astype(dtype)
    f = rng.normal(size=(R, S, C, K)).astype(dtype)
    b = rng.normal(size=(K,)).astype(dtype)
    return ConvPlan(N, C, H, W, K, R, S, pad, stride), x, f, b


def _plan_args(plan):
    """ConvPlan's arguments for ``plan`` (to make the CPU kernels' plan of the same shape)."""
    return (plan.N, plan.C, plan.H, plan.W, plan.K, plan.R, plan.S, (plan.pad_h, plan.pad_w),
            (plan.str_h, plan.str_w), (plan.dil_h, plan.dil_w))


def _kernels(path):
    if path == "tiled":
        if _NO_MKL:
            pytest.skip(f"the tiled convolution passes call MKL: {_NO_MKL}")
        return KernelModules()
    return KernelModules(gemm=GemmThreads())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("case", sorted(SHAPES))
@pytest.mark.parametrize("path", ["tiled", "patches", "per-image", "numpy"])
def test_fprop_conv_epilogue_on_every_cpu_path(monkeypatch, path, case, relu, dtype):
    plan, x, f, b = _operands(case, dtype)
    out = np.full(plan.out_shape, np.nan, dtype)
    if path == "numpy":
        numpy_conv.fprop_conv(plan, x, f, out, b, relu)
    else:
        kernels = _kernels(path)
        if not kernels.active(np.dtype(dtype)):
            pytest.fail(f"C kernels failed to build: {kernels.unavailable_reason()}")
        if path == "per-image":
            monkeypatch.setattr(cpu_conv, "PATCH_BYTES", 1)
        plan = CPUConvPlan(*_plan_args(plan), dtype=dtype, kernels=kernels)
        assert plan.fprop(x, f, out, b, relu)
    want = _reference(plan, x, f, b, relu)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    if relu:
        assert (out == 0).any() and (out > 0).any(), "the case must exercise both sides of 0"


def test_direct_kernel_takes_the_direct_cases():
    """The "direct_*" shapes above really run the direct kernels (else the path goes untested)."""
    kernels = KernelModules(gemm=GemmThreads())
    for case in ("direct_3x3", "direct_5x5_batch1"):
        plan, *_ = _operands(case, np.float32)
        assert CPUConvPlan(*_plan_args(plan), kernels=kernels).algorithm == "direct", case
    plan, *_ = _operands("patches_strided", np.float32)
    assert CPUConvPlan(*_plan_args(plan), kernels=kernels).direct is None


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_epilogue_relu_keeps_nan(case):
    """A NaN from the convolution survives the ReLU (a loss scaler must still see it)."""
    kernels = KernelModules(gemm=GemmThreads())
    plan, x, f, b = _operands(case, np.float32)
    x[0, 0, 0, 0] = np.nan
    out = np.empty(plan.out_shape, np.float32)
    assert CPUConvPlan(*_plan_args(plan), kernels=kernels).fprop(x, f, out, b, True)
    ref = np.empty(plan.out_shape, np.float32)
    numpy_conv.fprop_conv(plan, x, f, ref, b, True)
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_fprop_conv_epilogue_every_backend(case):
    plan_args = SHAPES[case]

    def op(be, x, f, b):
        N, H, W, C, K, R, S, pad, stride = plan_args
        plan = be.conv_layer(N, C, H, W, K, R, S, pad=pad, stride=stride)
        out = be.empty(plan.out_shape)
        be.fprop_conv(plan, x, f, out, bias=b, relu=True)
        return out

    plan, x, f, b = _operands(case, np.float32)
    got = compare_with_cpu(op, x, f, b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, _reference(plan, x, f, b, True), rtol=1e-4, atol=1e-4)


# ---- the layer ----------------------------------------------------------------------------------
def _run(layers, x, error, dtype=np.float64):
    """Output, input gradient and parameter gradients (by name) of ``layers`` after one
    fprop/bprop on a fresh backend with seed 0."""
    be = neonlite.gen_backend("cpu", batch_size=x.shape[0], rng_seed=0, datatype=dtype)
    net = Sequential(layers, name="net")
    net.name_children()
    net.configure(x.shape[1:], None)
    net.set_needs_deltas(True)
    net.allocate()
    out = net.fprop(be.array(x)).get()
    deltas = net.bprop(be.array(error)).get()
    return out, deltas, {p.attr: p.grad.get() for p in net.parameters()}, net


@pytest.mark.parametrize("fshape,strides,padding", [((3, 3, 16), 1, 1), ((2, 3, 5), 2, 0)])
def test_conv_layer_fuses_bias_and_relu_exactly(fshape, strides, padding):
    """Conv(bias, Rectlin()) is one Convolution layer, and matches the unfused chain bit for bit
    in float64: output, data gradient, and the W and b gradients."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 7, 6, 2))
    init, bias = Gaussian(scale=0.5), Uniform(-0.5, 0.5)
    fused_layer = Conv(fshape, strides, padding, init=init, bias=bias, activation=Rectlin())
    assert len(fused_layer.layers) == 1 and isinstance(fused_layer.layers[0], Convolution)
    assert isinstance(fused_layer.activation, Rectlin)
    unfused = [Convolution(fshape, strides, padding, init=init), Bias(init=bias),
               Activation(Rectlin())]
    (R, S, K), (ph, pw) = fshape, (padding, padding)
    plan = ConvPlan(3, 2, 7, 6, K, R, S, (ph, pw), (strides, strides))
    error = rng.normal(size=plan.out_shape)
    fused = _run([fused_layer], x, error)
    plain = _run(unfused, x, error)
    assert [p.name for p in fused[3].parameters()] == ["net.Conv_0.W", "net.Conv_0.b"]
    assert (fused[0] == 0).any() and (fused[0] > 0).any()
    np.testing.assert_array_equal(fused[0], plain[0])
    np.testing.assert_array_equal(fused[1], plain[1])
    np.testing.assert_array_equal(fused[2]["W"], plain[2]["W"])
    np.testing.assert_array_equal(fused[2]["b"], plain[2]["b"])


def test_conv_keeps_other_activations_as_layers():
    """Only a plain ReLU fuses: Tanh and a leaky ReLU follow as Activation layers (the bias is
    still fused); with batch norm the bias is dropped and batch norm takes the ReLU."""
    tanh = Conv((3, 3, 4), bias=Uniform(), activation=Tanh())
    assert [type(layer).__name__ for layer in tanh.layers] == ["Convolution", "Activation"]
    assert tanh.layers[0].bias_init is not None and tanh.layers[0].activation is None
    leaky = Conv((3, 3, 4), activation=Rectlin(slope=0.1))
    assert [type(layer).__name__ for layer in leaky.layers] == ["Convolution", "Activation"]
    bn = Conv((3, 3, 4), activation=Rectlin(), batch_norm=True)
    assert [type(layer).__name__ for layer in bn.layers] == ["Convolution", "BatchNorm"]
    assert bn.layers[0].bias_init is None and bn.layers[0].activation is None
    none = Conv((3, 3, 4), bias=None, activation=Rectlin())
    assert [type(layer).__name__ for layer in none.layers] == ["Convolution", "Activation"]


def test_convolution_rejects_an_activation_it_cannot_fuse():
    with pytest.raises(ValueError, match=r"Convolution: activation must be a plain ReLU.*Tanh"):
        Convolution((3, 3, 4), activation=Tanh())


@pytest.mark.parametrize("fshape,strides,padding", [((3, 3, 3), 1, 1), ((2, 2, 4), 2, 0)])
def test_fused_conv_gradients(fshape, strides, padding):
    """Finite differences (float64) through the fused bias + ReLU epilogue."""
    gradient_check(lambda: Convolution(fshape, strides, padding, init=Gaussian(scale=0.3),
                                       bias=Uniform(-0.3, 0.3), activation=Rectlin()),
                   (5, 5, 2))
