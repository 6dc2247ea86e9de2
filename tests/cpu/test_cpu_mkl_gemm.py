"""MKL GEMMs (used when the mkl wheel is installed) against numpy.matmul on every layout the
CPU backend hands them: transposed views, strided rows, broadcast batches."""
import numpy as np
import pytest

from support.requires import requires

from neonlite.backends.cpu.mkl_blas import MKLGemm, _matrix_layout, load_mkl

needs_mkl = requires("mkl")


def _views(x):
    """x itself, a transposed-storage view of it, and a view with padded rows."""
    padded = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), x.dtype)
    padded[..., :x.shape[-1]] = x
    flipped = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    return [x, np.swapaxes(flipped, -1, -2), padded[..., :x.shape[-1]]]


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 7, 3), (1, 4, 6), (64, 1, 9), (33, 65, 17)])
def test_gemm_matches_numpy(dtype, m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for av in _views(a):
        for bv in _views(b):
            out = np.full((m, n), np.nan, dtype)
            MKLGemm().matmul(av, bv, out)
            np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol * k)


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_gemm_matches_numpy(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 6, 5)).astype(dtype)
    b = rng.standard_normal((4, 5, 3)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for av in _views(a):
        for bv in _views(b) + [b[0], b[:1]]:
            out = np.full((4, 6, 3), np.nan, dtype)
            MKLGemm().matmul(av, bv, out)
            np.testing.assert_allclose(out, np.matmul(av, bv), rtol=tol, atol=tol * 5)


@needs_mkl
def test_unsupported_layouts_fall_back_to_numpy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 8)).astype(np.float16)
    b = rng.standard_normal((8, 4)).astype(np.float16)
    out = np.empty((6, 4), np.float16)
    MKLGemm().matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-2, atol=1e-2)
    a32 = rng.standard_normal((6, 16)).astype(np.float32)[:, ::2]
    out32 = np.empty((6, 4), np.float32)
    MKLGemm().matmul(a32, b.astype(np.float32), out32)
    np.testing.assert_allclose(out32, a32 @ b.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_matrix_layout_reads_strides():
    x = np.zeros((3, 5), np.float32)
    assert _matrix_layout(x.shape, x.strides, 4) == (111, 5)
    assert _matrix_layout(x.T.shape, x.T.strides, 4) == (112, 5)
    assert _matrix_layout(x[:, ::2].shape, x[:, ::2].strides, 4) is None


def test_blas_choice_can_be_turned_off(monkeypatch):
    load_mkl.cache_clear()
    monkeypatch.setenv("NEONLITE_BLAS", "numpy")
    try:
        assert load_mkl() is None
    finally:
        load_mkl.cache_clear()


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scaled_gemm_accumulates_in_one_call(dtype):
    """matmul_scaled: out = alpha a @ b + beta out, 2-D and batched, any layout _views makes;
    a layout met again reuses its plan with the new operands' data."""
    rng = np.random.default_rng(4)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    gemm = MKLGemm()
    for shape_a, shape_b in (((9, 7), (7, 5)), ((3, 9, 7), (3, 7, 5))):
        for repeat in range(2):
            a = rng.standard_normal(shape_a).astype(dtype)
            b = rng.standard_normal(shape_b).astype(dtype)
            for av in _views(a):
                for bv in _views(b):
                    start = rng.standard_normal(np.matmul(a, b).shape).astype(dtype)
                    out = start.copy()
                    assert gemm.matmul_scaled(av, bv, out, 0.5, 2.0)
                    np.testing.assert_allclose(out, 0.5 * np.matmul(a, b) + 2.0 * start,
                                               rtol=tol, atol=tol * 10)
    assert not gemm.matmul_scaled(np.ones((4, 8), dtype)[:, ::2], np.ones((4, 3), dtype),
                                  np.zeros((4, 3), dtype), 1.0, 1.0)


def test_backend_gemm_with_beta_matches_numpy():
    """compound_dot with beta (a weight gradient accumulated) and the output overlapping an
    operand (left to the scratch path) both give alpha a b + beta c."""
    from support.harness import make_backend
    be = make_backend("cpu", dtype=np.float64)
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(s) for s in ((12, 6), (12, 4), (6, 4)))
    A, B, C = be.array(a), be.array(b), be.array(c)
    be.compound_dot(A, B, C, alpha=2.0, beta=1.0, transA=True)
    np.testing.assert_allclose(C.get(), 2.0 * a.T @ b + c, rtol=1e-12)
    sq = rng.standard_normal((5, 5))
    S = be.array(sq)
    be.compound_dot(S, S, S, beta=1.0)
    np.testing.assert_allclose(S.get(), sq @ sq + sq, rtol=1e-12)
