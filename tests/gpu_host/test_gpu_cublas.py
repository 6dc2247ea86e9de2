"""The cuBLAS binding without a GPU: the cffi declarations parse, a missing library is one
clear error, and the row-major -> column-major argument mapping, run through a numpy model of
``cublasGemmEx``'s column-major semantics on raw memory, gives op(A) @ op(B) for every
transpose flag and for transposed (``.T``) and padded (row stride > columns) operands."""
import numpy as np
import pytest

from neonlite.backends.gpu import blas as cublas


def test_cdef_parses_and_declares_the_functions():
    ffi = cublas.ffi()
    for name in ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
                 "cublasGemmEx", "cublasGemmStridedBatchedEx"):
        assert name in cublas.CDEF
    assert ffi.sizeof("cublasHandle_t") == ffi.sizeof("void*")
    ffi.typeof("cublasStatus_t(*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,"
               " int, const void*, const void*, cudaDataType, int, const void*, cudaDataType, "
               "int, const void*, void*, cudaDataType, int, cublasComputeType_t, "
               "cublasGemmAlgo_t)")


def test_missing_library_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(cublas, "candidates", lambda: [str(tmp_path / "libcublas.so.13")])
    with pytest.raises(cublas.CublasUnavailable, match=r"libcublas\.so\.13.*nvidia-cublas"):
        cublas.load()
    monkeypatch.setattr(cublas, "candidates", lambda: [])
    with pytest.raises(cublas.CublasUnavailable, match=r"NEONLITE_CUBLAS"):
        cublas.load()


def test_environment_override_comes_first(monkeypatch):
    monkeypatch.setenv("NEONLITE_CUBLAS", "/opt/x/libcublas.so")
    assert cublas.candidates()[0] == "/opt/x/libcublas.so"


def _col_major(memory, op, rows, cols, ld):
    """The op()-applied operand a column-major BLAS reads from flat ``memory``: the stored
    matrix is (rows, cols) column-major with leading dimension ld (rows/cols before op)."""
    stored = np.lib.stride_tricks.as_strided(memory, (rows, cols),
                                             (memory.itemsize, ld * memory.itemsize))
    return stored.T if op == cublas.OP_T else stored


def _run_gemm(a_view, b_view, c_view, transA, transB, alpha=1.0, beta=0.0):
    """Run the mapped call on flat memory and return C as the row-major caller sees it."""
    strides = [tuple(s // v.itemsize for s in v.strides) for v in (a_view, b_view, c_view)]
    call = cublas.gemm_arguments((a_view.shape, strides[0]), (b_view.shape, strides[1]),
                                 (c_view.shape, strides[2]), transA, transB)
    transa, transb, m, n, k, (_, lda), (_, ldb), ldc = call
    flat = lambda v: np.lib.stride_tricks.as_strided(v, (10 ** 6,), (v.itemsize,))  # noqa: E731
    A = _col_major(flat(b_view), transa, *((k, m) if transa == cublas.OP_T else (m, k)), lda)
    B = _col_major(flat(a_view), transb, *((n, k) if transb == cublas.OP_T else (k, n)), ldb)
    C = np.lib.stride_tricks.as_strided(flat(c_view), (m, n), (c_view.itemsize,
                                                               ldc * c_view.itemsize))
    C[...] = alpha * (A @ B) + beta * C
    return c_view


@pytest.mark.parametrize("transA", [False, True])
@pytest.mark.parametrize("transB", [False, True])
@pytest.mark.parametrize("layout", ["plain", "dotT", "padded"])
def test_row_major_gemm_mapping(transA, transB, layout):
    rng = np.random.default_rng(0)
    M, N, K = 5, 3, 4
    a_shape = (K, M) if transA else (M, K)
    b_shape = (N, K) if transB else (K, N)
    pool = np.zeros(4096, np.float64)

    def place(offset, shape):
        values = rng.normal(size=shape)
        if layout == "dotT":
            view = np.lib.stride_tricks.as_strided(pool[offset:], shape, (8, shape[0] * 8))
        elif layout == "padded":
            view = np.lib.stride_tricks.as_strided(pool[offset:], shape, ((shape[1] + 3) * 8, 8))
        else:
            view = pool[offset:offset + values.size].reshape(shape)
        view[...] = values
        return view, values

    a_view, a = place(0, a_shape)
    b_view, b = place(1000, b_shape)
    c_store = pool[2000:2000 + 4 * M * (N + 2)]
    c_view = np.lib.stride_tricks.as_strided(c_store, (M, N), ((N + 2) * 8, 8))
    c_view[...] = c0 = rng.normal(size=(M, N))
    got = _run_gemm(a_view, b_view, c_view, transA, transB, alpha=0.5, beta=2.0)
    want = 0.5 * (a.T if transA else a) @ (b.T if transB else b) + 2.0 * c0
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_operands_without_a_unit_stride_need_a_copy():
    assert cublas.matrix_layout((3, 4), (8, 2)) is None
    assert cublas.matrix_layout((3, 4), (4, 1)) == (False, 4)
    assert cublas.matrix_layout((3, 4), (1, 3)) == (True, 3)
    assert cublas.gemm_arguments(((3, 4), (4, 1)), ((4, 2), (2, 1)), ((3, 2), (1, 3)),
                                 False, False) is None, "a transposed C cannot be written"
