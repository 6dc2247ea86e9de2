"""The CPU C kernels behind the transformer layers, against numpy references: the float erf
and GELU (fused with a bias, and its gradient with the bias gradient), and the masked attention
softmax (causal and padding masks, T=1, Tq != Tk, odd sizes), in float32 and float64; the
op-trees the GPU backend runs (``GPUGeluOps``, ``shared/gelu.py``; run here on the CPU backend)
are compared too."""
import math

import numpy as np
import pytest
from support.harness import compare_with_cpu, make_backend
from support.table_kernels import run_kernel

from neonlite.backends.reference import softmax as numpy_softmax
from neonlite.backends.gpu.gelu import GPUGeluOps
from neonlite.backends.shared import gelu
from neonlite.backends.cpu.rows import scatter_add_rows_kernel, take_rows_kernel
from neonlite.backends.cpu.softmax import masked_softmax_kernel

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _kernels(be):
    if be.kernels.module("gelu", np.dtype(np.float32)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    return be.kernels


def gelu_reference(h, approximate):
    h = h.astype(np.float64)
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (h + 0.044715 * h ** 3))
        slope = 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * k * (1 + 3 * 0.044715 * h * h)
        return 0.5 * h * (1 + t), slope
    cdf = 0.5 * (1 + _erf(h / math.sqrt(2)))
    return h * cdf, cdf + h * np.exp(-0.5 * h * h) / math.sqrt(2 * math.pi)


def test_float_erf_within_2e7_of_double_erf():
    be = make_backend("cpu")
    module = _kernels(be).module("gelu", np.dtype(np.float32))
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-6, 6, 400_001), rng.normal(scale=2, size=100_000),
                        np.linspace(0.86, 0.89, 20_001), [0.0, -0.0, 1e-30, -1e-30, 40, -40,
                                                          np.inf, -np.inf]]).astype(np.float32)
    y = np.empty_like(x)
    ffi = module.ffi
    module.lib.erf_values(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", y), x.size)
    err = np.abs(y.astype(np.float64) - _erf(x.astype(np.float64)))
    assert err.max() <= 2e-7, f"max |erf error| {err.max():.3g} at x={x[err.argmax()]!r}"
    assert np.isnan(_nan_erf(module))


def _nan_erf(module):
    x, y = np.array([np.nan], np.float32), np.zeros(1, np.float32)
    module.lib.erf_values(module.ffi.from_buffer("real[]", x), module.ffi.from_buffer("real[]", y),
                          1)
    return y[0]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 5, 7), (1, 1, 1), (2, 130, 33)])
def test_gelu_with_bias_and_its_gradient(approximate, dtype, shape):
    rng = np.random.default_rng(1)
    x, b, dy = rng.normal(scale=2, size=shape), rng.normal(size=shape[-1]), rng.normal(size=shape)
    x.reshape(-1)[::3] = -b[0]  # pre-activations of exactly 0 (Phi from y / x must not divide)
    x.reshape(-1)[1::5] = 1e-25 - b[0]
    y_want, slope = gelu_reference(x + b, approximate)
    tol = dict(rtol=1e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    be = make_backend("cpu", dtype=dtype)
    kernels = _kernels(be)
    # the C kernel (bprop with and without the forward output), then the contract's op-trees
    for fused, with_y in ((True, True), (True, False), (False, False)):
        xt, bt, dyt = be.array(x), be.array(b), be.array(dy)
        pre, out, dx = be.zeros(shape), be.zeros(shape), be.zeros(shape)
        db = be.array(np.full(shape[-1], 0.5))
        if fused:
            assert run_kernel(kernels, "gelu", xt._ary, out._ary, bt._ary, xt._ary, approximate)
            pre = xt  # in place: x receives x + b
            assert run_kernel(kernels, "gelu_bprop", pre._ary, dyt._ary, dx._ary, db._ary,
                              approximate, out._ary if with_y else None)
        else:
            GPUGeluOps.gelu(be, xt, out, bt, pre, approximate)
            gelu.bprop(be, pre, dyt, dx, approximate)
            acc = db.reshape(1, shape[-1])
            acc[:] = acc + be.sum(dx.reshape(-1, shape[-1]), axis=0)
        np.testing.assert_allclose(pre.get(), x + b, **tol)
        np.testing.assert_allclose(out.get(), y_want, **tol)
        np.testing.assert_allclose(dx.get(), dy * slope, **tol)
        np.testing.assert_allclose(db.get(), 0.5 + (dy * slope).reshape(-1, shape[-1]).sum(0),
                                   rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)


def test_gelu_without_bias_in_place_gradient_on_every_backend():
    rng = np.random.default_rng(2)
    x, dy = rng.normal(scale=3, size=(4, 9, 6)), rng.normal(size=(4, 9, 6))
    y_want, slope = gelu_reference(x, "none")

    def op(be, xt, dyt):
        out = be.empty(xt.shape)
        be.gelu(xt, out)
        be.gelu_bprop(xt, dyt, dyt)  # dx may be dy
        return out, dyt

    got_y, got_dx = compare_with_cpu(op, x, dy)
    np.testing.assert_allclose(got_y, y_want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(got_dx, dy * slope, rtol=1e-5, atol=2e-6)


def test_gelu_bias_gradient_is_deterministic_across_thread_counts():
    be = make_backend("cpu")
    kernels = _kernels(be)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4096, 64)).astype(np.float32)
    dy = rng.normal(size=(4096, 64)).astype(np.float32)
    sums = []
    for _ in range(3):
        dx, db = np.empty_like(x), np.zeros(64, np.float32)
        assert run_kernel(kernels, "gelu_bprop", x, dy, dx, db, "none")
        sums.append(db)
    assert all(np.array_equal(sums[0], s) for s in sums[1:])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_with_bias_without_pre_on_every_backend(approximate):
    """Inference: pre=None, x + bias is not kept and x is left as it was."""
    rng = np.random.default_rng(5)
    x, b = rng.normal(scale=2, size=(3, 70, 33)), rng.normal(size=33)
    y_want, _ = gelu_reference(x + b, approximate)

    def op(be, xt, bt):
        out = be.empty(xt.shape)
        be.gelu(xt, out, bt, None, approximate)
        return out, xt

    got_y, got_x = compare_with_cpu(op, x, b)
    np.testing.assert_allclose(got_y, y_want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(got_x, x, rtol=1e-6)
    be = make_backend("cpu")
    xt, bt, out = be.array(x), be.array(b), be.zeros(x.shape)  # the contract's op-trees
    GPUGeluOps.gelu(be, xt, out, bt, None, approximate)
    np.testing.assert_allclose(out.get(), y_want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("tq,tk", [(1, 1), (1, 7), (7, 3), (5, 33), (33, 33)])
def test_c_masked_softmax_matches_numpy(dtype, causal, with_mask, tq, tk):
    rng = np.random.default_rng(4)
    B, N = 6, 3
    x = (rng.normal(size=(B, tq, tk)) * 4).astype(dtype)
    mask = None
    if with_mask:
        mask = (rng.random((N, tk)) > 0.4).astype(dtype)
        mask[1] = 0
    kernels = _kernels(make_backend("cpu", dtype=dtype))
    want = np.empty_like(x)
    numpy_softmax.masked_softmax(x, want, 0.3, causal, mask)
    got = np.full_like(x, np.nan)
    assert masked_softmax_kernel(kernels, x, got, 0.3, causal, mask)
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got, want, **tol)
    dy = rng.normal(size=x.shape).astype(dtype)
    dx_want = np.empty_like(x)
    numpy_softmax.masked_softmax_bprop(want, dy, dx_want, 0.3)
    assert run_kernel(kernels, "masked_softmax_bprop", got, dy, dy, 0.3)  # in place
    np.testing.assert_allclose(dy, dx_want, rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
    if with_mask:
        assert not got[2:4].any()


def test_c_masked_softmax_in_place_with_integer_mask():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 3, 8)).astype(np.float32)
    mask = np.array([[1] * 5 + [0] * 3, [0] + [1] * 7], dtype=np.int64)
    want = np.empty_like(x)
    numpy_softmax.masked_softmax(x, want, 1.0, True, mask)
    kernels = _kernels(make_backend("cpu"))
    assert masked_softmax_kernel(kernels, x, x, 1.0, True, mask)
    np.testing.assert_allclose(x, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("D", [1, 7, 130])
def test_c_take_and_scatter_add_rows(dtype, D):
    rng = np.random.default_rng(6)
    V, shape = 11, (5, 9)
    table = rng.normal(size=(V, D)).astype(dtype)
    ids = rng.integers(0, V, size=shape)
    ids[0, :4] = 3  # repeated ids
    rows = rng.normal(size=shape + (D,)).astype(dtype)
    kernels = _kernels(make_backend("cpu", dtype=dtype))
    idx = ids.reshape(-1).astype(np.int64)
    out = np.full(shape + (D,), np.nan, dtype)
    assert take_rows_kernel(kernels, table, idx, out)
    np.testing.assert_array_equal(out, table[ids])
    grad = np.full((V, D), 0.25, dtype)
    assert scatter_add_rows_kernel(kernels, grad, idx, rows)
    want = np.full((V, D), 0.25)
    np.add.at(want, ids.reshape(-1), rows.reshape(-1, D).astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(grad, want, rtol=tol, atol=tol)


def test_c_scatter_add_is_the_same_on_any_number_of_threads():
    rng = np.random.default_rng(7)
    V, n, D = 5, 4096, 256
    idx = rng.integers(0, V, size=n).astype(np.int64)
    rows = rng.normal(size=(n, D)).astype(np.float32)
    kernels = _kernels(make_backend("cpu"))
    serial = np.zeros((V, D), np.float32)
    for i in range(n):  # the documented order: row 0, 1, 2, ... into its table row
        serial[idx[i]] += rows[i]
    grad = np.zeros((V, D), np.float32)
    assert scatter_add_rows_kernel(kernels, grad, idx, rows)
    np.testing.assert_array_equal(grad, serial)


def test_backend_rows_reject_bad_ids_before_the_kernel():
    be = make_backend("cpu")
    table, out = be.array(np.ones((4, 3))), be.zeros((2, 3))
    with pytest.raises(IndexError, match="id 4 at position"):
        be.take_rows(table, be.array(np.array([1, 4])), out)
    grad = be.zeros((4, 3))
    with pytest.raises(IndexError, match="whole number"):
        be.scatter_add_rows(grad, be.array(np.array([0.5, 1.0])), be.ones((2, 3)))
    assert not grad.get().any()
