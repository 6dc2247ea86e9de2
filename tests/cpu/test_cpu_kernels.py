"""The C kernels of the CPU backend against the numpy implementations they replace.

Every kernel runs on odd shapes (batch 1, 1x1 filters, stride > filter, padding > 0,
non-square images, C = 3, dilation) in float32 and float64, and its result must match numpy's
to rounding.  The kernels must build wherever a C compiler exists; the tests skip (with the
reason) only where none does.
"""
import numpy as np
import pytest

from support.requires import requires
from support.table_kernels import run_kernel, run_reference

from neonlite.backends.cpu import conv as cpu_conv
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.conv import CPUConvPlan
from neonlite.backends.cpu.pool import CPUPoolPlan
from neonlite.backends.reference import conv as numpy_conv, norm as numpy_norm
from neonlite.backends.reference import pool as numpy_pool, softmax as numpy_softmax
from neonlite.backends.cpu.backend import CPUBackend
from neonlite.backends.cpu.softmax import softmax_cross_entropy_kernel
from neonlite.backends.cpu.blas import GemmThreads
from neonlite.backends.cpu.mkl_blas import load_mkl
from neonlite.backends.cpu.optree import OpTreeMachine
from neonlite.backends.reference.optree import evaluate
from neonlite.backends.plans import ConvPlan, PoolPlan

DTYPES = (np.float32, np.float64)
TOL = {np.float32: 2e-5, np.float64: 1e-12}


pytestmark = requires("compiler")


@pytest.fixture(scope="module")
def kernels():
    found = KernelModules()
    for dtype in DTYPES:
        assert found.active(dtype), f"C kernels failed to build: {found.unavailable_reason()}"
    return found


def close(actual, expected, dtype):
    """Max abs difference within TOL relative to the expected values' scale."""
    scale = max(1.0, float(np.abs(expected).max()) if expected.size else 1.0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOL[dtype] * scale)


def rand(rng, shape, dtype, offset=0.0):
    return (rng.standard_normal(shape) + offset).astype(dtype)


# (N, H, W, C, K, R, S, pad, stride, dilation)
CONV_CASES = [
    (1, 5, 7, 3, 4, 3, 3, (1, 1), (1, 1), (1, 1)),     # batch 1, non-square, C=3, padding
    (2, 6, 5, 3, 2, 1, 1, (0, 0), (1, 1), (1, 1)),     # 1x1 pointwise (pure GEMM)
    (2, 6, 6, 3, 4, 1, 1, (1, 1), (2, 2), (1, 1)),     # 1x1 with padding and stride
    (3, 9, 8, 2, 5, 2, 2, (0, 0), (3, 3), (1, 1)),     # stride > filter
    (2, 7, 9, 3, 4, 3, 2, (2, 1), (2, 1), (1, 1)),     # non-square filter and stride
    (2, 8, 8, 3, 2, 3, 3, (2, 2), (1, 2), (2, 2)),     # dilation
    (2, 4, 4, 1, 3, 5, 5, (2, 2), (1, 1), (1, 1)),     # filter larger than input, C=1
]


_NO_MKL = None if load_mkl() is not None else "MKL is not installed (pip install mkl)"


@pytest.fixture(scope="module")
def numpy_blas_kernels():
    """Kernels whose GEMMs go to numpy's BLAS: convolution takes the whole-matrix path."""
    return KernelModules(gemm=GemmThreads())


CONV_MODES = {
    # MKL: tiled passes, patch rows gathered per thread into about _TILE_BYTES
    "tiled": ("kernels", "TILE_BYTES", None),
    "tiled-one-row": ("kernels", "TILE_BYTES", 1),
    "tiled-three-rows": ("kernels", "TILE_BYTES", 3),  # ragged last tile
    # numpy's BLAS: the patch matrix of the whole batch, or of one image at a time
    "whole-batch": ("numpy_blas_kernels", "PATCH_BYTES", None),
    "per-image": ("numpy_blas_kernels", "PATCH_BYTES", 1),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("mode", list(CONV_MODES))
def test_conv_matches_numpy(request, monkeypatch, case, dtype, mode):
    fixture, limit, value = CONV_MODES[mode]
    if fixture == "kernels" and _NO_MKL:
        pytest.skip(f"the tiled convolution passes call MKL: {_NO_MKL}")
    kernels = request.getfixturevalue(fixture)
    assert (CPUConvPlan(1, 3, 5, 5, 4, 3, 3, dtype=dtype, kernels=kernels).tiles is not None) == \
        (fixture == "kernels")
    N, H, W, C, K, R, S, pad, stride, dil = case
    rng = np.random.default_rng(1)
    if value is not None:
        Q = ConvPlan(N, C, H, W, K, R, S, pad, stride, dil).Q
        rows = value * Q * R * S * C * np.dtype(dtype).itemsize if value > 1 else 1
        monkeypatch.setattr(cpu_conv, limit, rows)
    plan_c = CPUConvPlan(N, C, H, W, K, R, S, pad, stride, dil, dtype=dtype, kernels=kernels)
    plan_np = ConvPlan(N, C, H, W, K, R, S, pad, stride, dil)
    x, f = rand(rng, (N, H, W, C), dtype), rand(rng, (R, S, C, K), dtype)
    e = rand(rng, plan_c.out_shape, dtype)

    out_c, out_np = np.empty(plan_c.out_shape, dtype), np.empty(plan_c.out_shape, dtype)
    assert plan_c.fprop(x, f, out_c)
    numpy_conv.fprop_conv(plan_np, x, f, out_np)
    close(out_c, out_np, dtype)

    for beta in (0.0, 1.0):
        gf_c = rand(rng, f.shape, dtype)
        gf_np = gf_c.copy()
        assert plan_c.update(x, e, gf_c, beta)
        numpy_conv.update_conv(plan_np, x, e, gf_np, beta)
        close(gf_c, gf_np, dtype)

    for beta in (0.0, 0.5):
        gx_c = rand(rng, x.shape, dtype)
        gx_np = gx_c.copy()
        assert plan_c.bprop(f, e, gx_c, beta)
        numpy_conv.bprop_conv(plan_np, f, e, gx_np, beta)
        close(gx_c, gx_np, dtype)

    x2 = rand(rng, x.shape, dtype)
    gf_c, gf_np = np.zeros_like(f), np.zeros_like(f)
    assert plan_c.update(x2, e, gf_c, 0.0)     # patches not gathered yet
    numpy_conv.update_conv(plan_np, x2, e, gf_np, 0.0)
    close(gf_c, gf_np, dtype)


def test_conv_bprop_zero_beta_overwrites_nan(kernels):
    """beta = 0 must overwrite, not scale, what the gradient buffer held (NaN included)."""
    plan = CPUConvPlan(2, 3, 5, 5, 4, 3, 3, (1, 1), dtype=np.float32, kernels=kernels)
    rng = np.random.default_rng(2)
    f, e = rand(rng, (3, 3, 3, 4), np.float32), rand(rng, plan.out_shape, np.float32)
    grad = np.full(plan.in_shape, np.nan, np.float32)
    assert plan.bprop(f, e, grad, 0.0)
    assert np.isfinite(grad).all()


# (N, H, W, C, R, S, pad, stride)
POOL_CASES = [
    (1, 5, 7, 3, 2, 2, (0, 0), (2, 2)),     # batch 1, non-square, ragged edge
    (2, 6, 5, 3, 3, 3, (1, 1), (1, 1)),     # overlapping windows with padding
    (2, 9, 8, 2, 2, 2, (0, 0), (3, 3)),     # stride > window (gaps)
    (2, 7, 7, 3, 3, 2, (1, 1), (2, 1)),     # non-square window, overlap in one axis only
    (3, 4, 4, 1, 1, 1, (0, 0), (1, 1)),     # 1x1 window
    (2, 7, 9, 3, 3, 2, (1, 1), (3, 2)),     # disjoint windows with padding, ragged edges
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("op", ["max", "avg"])
def test_pool_matches_numpy(kernels, case, dtype, op):
    N, H, W, C, R, S, pad, stride = case
    rng = np.random.default_rng(3)
    plan_c = CPUPoolPlan(op, N, C, H, W, R, S, pad, stride, dtype=dtype, kernels=kernels)
    plan_np = PoolPlan(op, N, C, H, W, R, S, pad, stride)
    x = rand(rng, (N, H, W, C), dtype)
    out_c, out_np = np.empty(plan_c.out_shape, dtype), np.empty(plan_c.out_shape, dtype)
    assert plan_c.fprop(x, out_c)
    numpy_pool.fprop_pool(plan_np, x, out_np)
    close(out_c, out_np, dtype)
    e = rand(rng, plan_c.out_shape, dtype)
    for beta in (0.0, 0.5):
        gx_c = rand(rng, x.shape, dtype)
        gx_np = gx_c.copy()
        assert plan_c.bprop(e, gx_c, beta)
        numpy_pool.bprop_pool(plan_np, e, gx_np, beta)
        close(gx_c, gx_np, dtype)


def test_maxpool_ties_go_to_the_first_tap(kernels):
    plan = CPUPoolPlan("max", 1, 1, 2, 2, 2, 2, dtype=np.float32, kernels=kernels)
    x = np.ones((1, 2, 2, 1), np.float32)
    out = np.empty(plan.out_shape, np.float32)
    assert plan.fprop(x, out)
    grad = np.empty_like(x)
    assert plan.bprop(np.full(plan.out_shape, 3.0, np.float32), grad)
    np.testing.assert_array_equal(grad.ravel(), [3.0, 0.0, 0.0, 0.0])


def _norm_arrays(rng, M, C, dtype):
    row = (1, C)
    return {"gamma": rand(rng, row, dtype, 1.0), "beta": rand(rng, row, dtype),
            "running_mean": rand(rng, row, dtype), "running_var": np.abs(rand(rng, row, dtype))
            + 0.5, "dy": rand(rng, (M, C), dtype)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,C", [(1, 3), (37, 5), (2 * 5 * 7, 3), (3000, 17)])
@pytest.mark.parametrize("inference", [False, True])
def test_batchnorm_matches_numpy(kernels, dtype, M, C, inference):
    rng = np.random.default_rng(4)
    x = rand(rng, (M, C), dtype) * 3 + 5
    p = _norm_arrays(rng, M, C, dtype)
    results = []
    for impl in ("c", "numpy"):
        y, xhat = np.empty((M, C), dtype), np.empty((M, C), dtype)
        mean, invstd = np.empty((1, C), dtype), np.empty((1, C), dtype)
        rm, rv = p["running_mean"].copy(), p["running_var"].copy()
        args = (x, p["gamma"], p["beta"], y, xhat, mean, invstd, rm, rv, 1e-5, 0.9, inference)
        if impl == "c":
            assert run_kernel(kernels, "batchnorm_fprop", *args)
        else:
            numpy_norm.batchnorm_fprop(*args)
        outs = [y, xhat, mean, invstd, rm, rv]
        if not inference:
            for beta_acc in (0.0, 1.0):
                dx = rand(np.random.default_rng(5), (M, C), dtype)
                dgamma, dbeta = np.ones((1, C), dtype), np.ones((1, C), dtype)
                bargs = (p["dy"], xhat, invstd, p["gamma"], dx, dgamma, dbeta, beta_acc)
                if impl == "c":
                    assert run_kernel(kernels, "batchnorm_bprop", *bargs)
                else:
                    numpy_norm.batchnorm_bprop(*bargs[:7], beta_acc=beta_acc)
                outs += [dx, dgamma, dbeta]
        results.append(outs)
    tol = {np.float32: 2e-4 if M > 1 else 2e-5, np.float64: 1e-9}[dtype]
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,D", [(1, 7), (13, 5), (4, 33), (300, 128)])
def test_layernorm_matches_numpy(kernels, dtype, M, D):
    rng = np.random.default_rng(6)
    x = rand(rng, (M, D), dtype) * 2 + 1
    gamma, beta = rand(rng, (1, D), dtype, 1.0), rand(rng, (1, D), dtype)
    dy = rand(rng, (M, D), dtype)
    results = []
    for impl in (kernels, None):
        y, xhat, invstd = np.empty((M, D), dtype), np.empty((M, D), dtype), np.empty((M, 1), dtype)
        dx, dgamma, dbeta = np.empty((M, D), dtype), np.ones((1, D), dtype), np.ones((1, D), dtype)
        if impl is None:
            numpy_norm.layernorm_fprop(x, gamma, beta, y, xhat, invstd, eps=1e-5)
            numpy_norm.layernorm_bprop(dy, xhat, invstd, gamma, dx, dgamma, dbeta)
        else:
            assert run_kernel(impl, "layernorm_fprop", x, gamma, beta, y, xhat, invstd, 1e-5)
            assert run_kernel(impl, "layernorm_bprop", dy, xhat, invstd, gamma, dx, dgamma,
                              dbeta)
        results.append([y, xhat, invstd, dx, dgamma, dbeta])
    tol = {np.float32: 1e-4, np.float64: 1e-10}[dtype]
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,D", [(1, 7), (300, 128)])
def test_layernorm_fprop_of_a_residual_sum_is_that_of_the_sum(kernels, dtype, M, D):
    """total = x + residual, then the layer norm of total: bit for bit the two steps."""
    rng = np.random.default_rng(8)
    x, residual = rand(rng, (M, D), dtype), rand(rng, (M, D), dtype)
    gamma, beta = rand(rng, (1, D), dtype, 1.0), rand(rng, (1, D), dtype)
    outs = [[np.full((M, D), np.nan, dtype) for _ in range(3)] + [np.empty((M, 1), dtype)]
            for _ in range(3)]
    (total, y, xhat, invstd), numpy_outs = outs[0], outs[1]
    assert run_kernel(kernels, "layernorm_fprop", x, gamma, beta, y, xhat, invstd, 1e-5,
                      residual, total)
    run_reference("layernorm_fprop", x, gamma, beta, *numpy_outs[1:], 1e-5, residual,
                  numpy_outs[0])
    total, y, xhat, invstd = outs[2]
    np.add(x, residual, out=total)
    assert run_kernel(kernels, "layernorm_fprop", total, gamma, beta, y, xhat, invstd, 1e-5)
    for got, want in zip(outs[0], outs[2]):
        np.testing.assert_array_equal(got, want)
    tol = {np.float32: 1e-4, np.float64: 1e-10}[dtype]
    for got, want in zip(outs[1], outs[2]):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,D", [(1, 7), (300, 128)])
def test_layernorm_fprop_without_xhat_gives_the_same_output(kernels, dtype, M, D):
    """Inference (xhat None, plain and joined with a residual): y and invstd as with xhat."""
    rng = np.random.default_rng(9)
    x, residual = rand(rng, (M, D), dtype), rand(rng, (M, D), dtype)
    gamma, beta = rand(rng, (1, D), dtype, 1.0), rand(rng, (1, D), dtype)
    for run in (lambda *a: run_kernel(kernels, "layernorm_fprop", *a),
                lambda *a: run_reference("layernorm_fprop", *a) is None):
        for joined in ((), (residual, np.empty((M, D), dtype))):
            y, xhat, invstd = np.empty((M, D), dtype), np.empty((M, D), dtype), \
                np.empty((M, 1), dtype)
            assert run(x, gamma, beta, y, xhat, invstd, 1e-5, *joined)
            y2, invstd2 = np.full((M, D), np.nan, dtype), np.full((M, 1), np.nan, dtype)
            assert run(x, gamma, beta, y2, None, invstd2, 1e-5, *joined)
            np.testing.assert_array_equal(invstd2, invstd)
            np.testing.assert_array_equal(y2, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,D", [(1, 7), (300, 128)])
def test_layernorm_bprop_with_residual_matches_numpy(kernels, dtype, M, D):
    """dx = residual + the input gradient, in the kernel's one pass and in numpy's two."""
    rng = np.random.default_rng(7)
    x, dy, residual = (rand(rng, (M, D), dtype) for _ in range(3))
    gamma = rand(rng, (1, D), dtype, 1.0)
    xhat, invstd = np.empty((M, D), dtype), np.empty((M, 1), dtype)
    numpy_norm.layernorm_fprop(x, gamma, gamma, np.empty((M, D), dtype), xhat, invstd, eps=1e-5)
    results = []
    for impl in (kernels, None):
        dx, dgamma, dbeta = np.empty((M, D), dtype), np.ones((1, D), dtype), np.ones((1, D), dtype)
        args = (dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual)
        if impl is None:
            numpy_norm.layernorm_bprop(*args)
        else:
            assert run_kernel(impl, "layernorm_bprop", *args)
        results.append([dx, dgamma, dbeta])
    plain = np.empty((M, D), dtype)
    numpy_norm.layernorm_bprop(dy, xhat, invstd, gamma, plain, np.ones((1, D), dtype),
                               np.ones((1, D), dtype))
    tol = {np.float32: 1e-4, np.float64: 1e-10}[dtype]
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))
    np.testing.assert_allclose(results[1][0], plain + residual, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K", [(1, 1), (1, 10), (7, 3), (129, 65)])
@pytest.mark.parametrize("soft", [False, True], ids=["one-hot", "soft"])
def test_softmax_cross_entropy_matches_numpy(kernels, dtype, M, K, soft):
    rng = np.random.default_rng(7)
    logits = rand(rng, (M, K), dtype) * 4
    logits[0, 0] += 100.0
    if soft:
        targets = np.abs(rand(rng, (M, K), dtype))
        targets /= targets.sum(axis=1, keepdims=True)
    else:
        targets = np.eye(K, dtype=dtype)[rng.integers(0, K, M)]
    outs = []
    for impl in (kernels, None):
        probs, grad, sm = (np.empty((M, K), dtype) for _ in range(3))
        if impl is None:
            loss = numpy_softmax.softmax_cross_entropy(logits, targets, probs, grad, 1.0 / M)
            numpy_softmax.softmax(logits, sm)
        else:
            loss = softmax_cross_entropy_kernel(impl, logits, targets, probs, grad, 1.0 / M)
            assert loss is not None
            assert run_kernel(impl, "softmax", logits, sm)
        outs.append((loss, probs, grad, sm))
    (loss_c, *arrays_c), (loss_np, *arrays_np) = outs
    assert loss_c == pytest.approx(loss_np, rel=1e-5 if dtype == np.float32 else 1e-12, abs=1e-4)
    for got, want in zip(arrays_c, arrays_np):
        close(got, want, dtype)


# ---- op-trees --------------------------------------------------------------------------------
@pytest.fixture(params=DTYPES, ids=["f32", "f64"])
def tbe(request, kernels):
    """A CPU backend of the parametrized dtype (not made current: no global state touched)."""
    return CPUBackend(batch_size=2, rng_seed=0, datatype=request.param)


def _tensor(be, rng, shape, positive=False, offset=0.0):
    ary = rng.standard_normal(shape) + offset
    return be.array(np.abs(ary) + 0.1 if positive else ary)


TREES = {
    "axpy": lambda be, t: t["a"] * 2.5 + t["b"],
    "bias": lambda be, t: t["img"] + t["bias"],
    "row-broadcast": lambda be, t: t["m"] - be.max(t["m"], axis=1),
    "col-broadcast": lambda be, t: t["m"] * be.sum(t["m"], axis=0),
    "sgd": lambda be, t: 0.9 * t["a"] - 0.01 * (t["b"] + 1e-4 * t["c"]),
    "adam": lambda be, t: t["a"] - 0.001 * t["b"] / (be.sqrt(t["p"]) * 1.2 + 1e-8),
    "relu-grad": lambda be, t: t["a"] * (t["b"] > 0.0),
    "leaky": lambda be, t: be.maximum(t["a"], 0.0) + 0.1 * be.minimum(t["a"], 0.0),
    "unary": lambda be, t: (-be.absolute(t["a"]) + be.square(t["b"]) + be.rsqrt(t["p"])
                            + be.exp(t["a"] * 0.1) + be.log(t["p"]) + be.tanh(t["b"])
                            + be.sig(t["a"]) + be.sign(t["b"]) + be.erf(t["a"])),
    "compare": lambda be, t: ((t["a"] == t["a"]) + (t["a"] != t["b"]) + (t["a"] < t["b"])
                              + (t["a"] <= t["b"]) + (t["a"] >= t["b"]) - (t["a"] > 0.5)),
    "pow-div": lambda be, t: be.power(t["p"], 1.5) / (t["p"] + 1.0) - 3.0 / t["p"],
    "transposed": lambda be, t: t["sq"].T * 2.0 + t["sq"],
    "scalar-only": lambda be, t: be.add(1.0, 2.0) * 0.5,
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_optree_machine_matches_numpy(tbe, name):
    rng = np.random.default_rng(8)
    t = {"a": _tensor(tbe, rng, (5, 7)), "b": _tensor(tbe, rng, (5, 7)),
         "c": _tensor(tbe, rng, (5, 7)), "p": _tensor(tbe, rng, (5, 7), positive=True),
         "m": _tensor(tbe, rng, (4, 300)), "img": _tensor(tbe, rng, (2, 3, 5, 3)),
         "bias": _tensor(tbe, rng, (3,)), "sq": _tensor(tbe, rng, (6, 6))}
    tree = TREES[name](tbe, t)
    shape = {"bias": (2, 3, 5, 3), "row-broadcast": (4, 300), "col-broadcast": (4, 300),
             "transposed": (6, 6)}.get(name, (5, 7))
    out = np.empty(shape, tbe.dtype)
    assert OpTreeMachine(tbe.kernels).run(out, tree), "the machine refused a tree it supports"
    want = evaluate(np.empty(shape, tbe.dtype), tree)
    close(out, want, tbe.dtype.type)


def test_optree_machine_nan_and_large_grid(tbe):
    """NaN propagates through maximum/minimum as in numpy; a grid big enough to run on
    several threads gives the same result as numpy."""
    rng = np.random.default_rng(9)
    a = _tensor(tbe, rng, (300, 257))
    a._ary[3, 5] = np.nan
    tree = tbe.maximum(a, 0.0) + tbe.minimum(a, 0.0) * 0.5
    out = np.empty(a.shape, tbe.dtype)
    assert OpTreeMachine(tbe.kernels).run(out, tree)
    want = evaluate(np.empty(a.shape, tbe.dtype), tree)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    close(np.nan_to_num(out), np.nan_to_num(want), tbe.dtype.type)


def test_optree_in_place_update(tbe):
    """``v[:] = 0.9 * v - lr * g`` writes its own input: the same elements, so it is safe."""
    rng = np.random.default_rng(10)
    v, g = _tensor(tbe, rng, (64, 33)), _tensor(tbe, rng, (64, 33))
    want = 0.9 * v.get() - 0.01 * g.get()
    v[:] = 0.9 * v - 0.01 * g
    close(v.get(), want.astype(tbe.dtype), tbe.dtype.type)


def test_optree_cases_left_to_numpy(tbe):
    """Trees the machine does not take are refused (and the backend still gets them right)."""
    rng = np.random.default_rng(11)
    machine = OpTreeMachine(tbe.kernels)
    x3 = _tensor(tbe, rng, (2, 3, 4))
    y3 = _tensor(tbe, rng, (2, 1, 4))
    out = np.empty((2, 3, 4), tbe.dtype)
    assert not machine.run(out, x3 * y3)                       # does not merge into 2 axes
    assert not machine.run(np.empty((1, 1, 1), tbe.dtype), tbe.sum(x3))   # root reduction
    v = _tensor(tbe, rng, (10,))
    assert not machine.run(v._ary[1:], v[:-1] * 2.0)          # overlapping, shifted output
    wide = tbe.array(rng.standard_normal((2, 3, 4)), dtype=np.float16)
    assert not machine.run(out, wide + 1.0)                   # another dtype
    expected = v.get()[:-1] * 2.0
    v[1:] = v[:-1] * 2.0
    close(v.get()[1:], expected, tbe.dtype.type)


@pytest.mark.parametrize("shape,axis,fast", [
    ((300, 33), 0, True),                 # a bias gradient over rows, several threads
    ((3, 5, 4, 7), (0, 1, 2), True),      # NHWC over N, H, W
    ((2, 1, 9), (1, 0), True),            # axes in any order, a unit axis
    ((6, 4, 10), 1, False),               # an inner axis: numpy
    ((6, 4), None, False),                # every axis: numpy
])
def test_optree_leading_axis_sums_use_the_column_sum(tbe, monkeypatch, shape, axis, fast):
    from neonlite.backends.cpu import optree as cpu_optree
    rng = np.random.default_rng(13)
    x = _tensor(tbe, rng, shape)
    noncontig = tbe.array(rng.standard_normal(shape[:-1] + (2 * shape[-1],)))[..., ::2]
    kept = tuple(1 if axis is None or i in np.atleast_1d(axis) % len(shape) else s
                 for i, s in enumerate(shape))
    used = []
    column_sum = cpu_optree._column_sum
    monkeypatch.setattr(cpu_optree, "_column_sum",
                        lambda *a: used.append(column_sum(*a)) or used[-1])
    for t in (x, noncontig):
        b = _tensor(tbe, rng, kept)
        tree = b * 0.5 + tbe.sum(t, axis=axis)
        out = np.empty(kept, tbe.dtype)
        assert OpTreeMachine(tbe.kernels).run(out, tree)
        close(out, evaluate(np.empty(kept, tbe.dtype), tree), tbe.dtype.type)
    assert [u is not None for u in used] == [fast, False]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,C", [(1, 5), (12, 8192), (32, 1000), (7, 513), (33, 40)])
def test_column_sum_is_the_row_order_double_sum(kernels, dtype, M, C):
    """Up to 32 rows (a row per block) and past them (blocks of rows): the column sums are
    those of the fixed blocking, which for one row per block is the double sum in row order."""
    module = kernels.module("optree", np.dtype(dtype))
    ffi, rng = module.ffi, np.random.default_rng(14)
    a = (rng.standard_normal((M, C)) * np.exp(rng.standard_normal((M, C)) * 4)).astype(dtype)
    out = np.empty(C, dtype)
    work = np.zeros(int(module.lib.optree_column_sum_work_size(M, C)))
    module.lib.optree_column_sum(ffi.from_buffer("real[]", a), ffi.from_buffer("real[]", out),
                                 ffi.from_buffer("double[]", work), M, C)
    expected = np.zeros(C)
    for row in a.astype(np.float64):
        expected = expected + row
    if M <= 32:
        np.testing.assert_array_equal(out, expected.astype(dtype))
    else:
        np.testing.assert_allclose(out, expected, rtol=TOL[dtype], atol=TOL[dtype] * np.abs(a).max())


class SmallCNN:
    """conv 3x3 (padding, C=3) + batch norm + ReLU, max pool, conv 3x3 + bias + ReLU, affine +
    softmax with cross-entropy, SGD with momentum: a training step by hand on backend ``be``
    (made current only while the layers are configured)."""

    def __init__(self, be, n, hw=(6, 5), seed=12):
        import neonlite.backends as backends
        from neonlite.initializers import Gaussian
        from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling, Sequential
        from neonlite.optimizers import GradientDescentMomentum
        from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax
        previous, backends._current = backends._current, be
        try:
            self.layers = Sequential([
                Conv((3, 3, 4), padding=1, init=Gaussian(scale=0.3), activation=Rectlin(),
                     batch_norm=True),
                Pooling(2, strides=2),
                Conv((3, 3, 6), padding=1, init=Gaussian(scale=0.3), activation=Rectlin()),
                Affine(nout=5, init=Gaussian(scale=0.3), activation=Softmax())])
            self.layers.name_children()
            self.layers.configure((*hw, 3))
            self.layers.set_needs_deltas(False)
            self.layers.allocate()
        finally:
            backends._current = previous
        self.cost = GeneralizedCost(CrossEntropyMulti())
        self.cost.initialize(self.layers.leaves()[-1], (5,), be)
        self.opt = GradientDescentMomentum(0.1, momentum_coef=0.9, wdecay=1e-3)
        rng = np.random.default_rng(seed)
        self.x = be.array(rng.standard_normal((n, *hw, 3)))
        self.t = be.array(np.eye(5)[rng.integers(0, 5, n)])

    def step(self):
        params = self.layers.parameters()
        for p in params:
            p.grad[:] = 0.0
        y = self.layers.fprop(self.x)
        _, delta = self.cost.cost_and_errors(y, self.t)
        self.layers.bprop(delta)
        self.opt.optimize(params, 0)

    def params(self):
        return [p.value.get() for p in self.layers.parameters()]


def test_backend_uses_kernels_and_matches_numpy_in_training(kernels, monkeypatch):
    """A few training steps of a small CNN in float64 give the same parameters with the C
    kernels as on numpy alone."""
    with_c = CPUBackend(batch_size=4, rng_seed=0, datatype=np.float64)
    assert with_c.kernels.active(np.float64)
    model = SmallCNN(with_c, 4)
    for _ in range(3):
        model.step()
    got = model.params()
    monkeypatch.setenv("NEONLITE_CPU_KERNELS", "0")
    numpy_only = CPUBackend(batch_size=4, rng_seed=0, datatype=np.float64)
    assert not numpy_only.kernels.active(np.float64)
    reference = SmallCNN(numpy_only, 4)
    for _ in range(3):
        reference.step()
    for g, w in zip(got, reference.params()):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11)


def test_training_step_allocates_no_buffers_after_the_first(kernels):
    """After the first step, a training step makes no array anywhere near an activation's size
    (work buffers live on the plans and the backend)."""
    import tracemalloc
    be = CPUBackend(batch_size=32, rng_seed=0)
    model = SmallCNN(be, 32, hw=(24, 24))
    smallest = min(layer.outputs.size * 4 for layer in model.layers.leaves()
                   if layer.outputs.ndim == 4)
    model.step()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        model.step()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert smallest >= 2 ** 16
    assert peak < smallest // 4, f"a step allocated up to {peak} bytes"


@pytest.mark.parametrize("shape", [(3000, 20, 40), (20, 500, 3000), (20, 5000, 30)],
                         ids=["rows", "columns", "inner"])
def test_gemm_ways_agree_and_a_choice_is_made(shape):
    """Every way of running a GEMM (one thread, all, split by rows or by the inner dimension)
    gives the product; after the trials the tuner settles on one way per shape."""
    from neonlite.backends.cpu import blas as cpu_blas
    m, k, n = shape
    gemm = cpu_blas.GemmThreads(cores=2)
    assert cpu_blas._split_axis(m, k, n, 2) == {3000: "m", 20: "n" if n == 3000 else "k"}[m]
    rng = np.random.default_rng(13)
    a = rng.standard_normal((k, m)).astype(np.float32).T
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b
    out = np.empty((m, n), np.float32)
    key = (a.shape, a.strides, b.shape, b.strides, "f")
    for way in gemm._ways(a, b, out, key):
        out[...] = np.nan
        gemm._run(way, a, b, out, key)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3, err_msg=way)
    for _ in range(2 * cpu_blas.REVISIT):
        gemm.matmul(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
    assert len(gemm.choices) == 1 and list(gemm.choices.values())[0] in cpu_blas.WAYS
    small = np.empty((3, n), np.float32)
    gemm.matmul(a[:3, :50], b[:50], small)
    np.testing.assert_allclose(small, want[:3] - a[:3, 50:].astype(np.float64) @ b[50:],
                               rtol=1e-4, atol=1e-3)
    assert len(gemm.choices) == 1
    lib = cpu_blas.openblas()
    if lib is not None:
        before = lib.openblas_set_num_threads_local(2)
        with cpu_blas.blas_threads(1):
            assert lib.openblas_set_num_threads_local(1) == 1
        assert lib.openblas_set_num_threads_local(before) == 2


def test_way_tuner_revisits_less_often_while_the_choice_stands():
    """After the trials a losing way is run again REVISIT calls later, then after twice as
    many calls each time it loses again (up to MAX_REVISIT); once it wins, the choice changes
    and the intervals start again from REVISIT."""
    from neonlite.backends.cpu import blas as cpu_blas
    tuner = cpu_blas.WayTuner()
    cost = {"one": 2.0, "all": 1.0}

    def run(calls):
        """The call numbers (from 1) at which the tuner ran a way other than its choice."""
        others = []
        for number in range(1, calls + 1):
            chosen = tuner.choices.get("k")
            way = tuner.pick("k", lambda: ("one", "all"))
            if chosen is not None and way != chosen:
                others.append(number)
            tuner.record("k", way, cost[way])
        return others

    assert run(2 * cpu_blas.FIRST) == [] and tuner.choices["k"] == "all"
    R = cpu_blas.REVISIT
    assert run(R + 2 * R + 4 * R) == [R, 3 * R, 7 * R]
    assert len(run(20 * cpu_blas.MAX_REVISIT)) <= 20 + 6
    cost["one"] = 0.5
    calls = run(4 * cpu_blas.MAX_REVISIT)
    assert tuner.choices["k"] == "one"
    switch = calls[0]  # the revisit of "one" that changed the choice
    assert calls[1:4] == [switch + R, switch + 3 * R, switch + 7 * R]


def test_gemm_threads_follow_a_new_core_count():
    """After use_cores (a data-parallel rank pinned to fewer cores), the tuner measures again
    and no longer splits a GEMM into more pieces than cores."""
    from neonlite.backends.cpu import blas as cpu_blas
    gemm = cpu_blas.GemmThreads(cores=2)
    rng = np.random.default_rng(14)
    a, b = rng.standard_normal((3000, 40)), rng.standard_normal((40, 30))
    out = np.empty((3000, 30))
    for _ in range(8):
        gemm.matmul(a, b, out)
    assert gemm.choices
    gemm.use_cores(1)
    assert gemm.cores == 1 and not gemm.choices
    gemm.matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    assert all("split" not in ways for ways in gemm.tuner._timings.values())
