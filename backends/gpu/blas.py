"""A cffi (ABI mode) binding of the few cuBLAS functions the GPU backend needs, and the
row-major GEMM on top of them.

cuBLAS is column-major; neonlite's matrices are row-major and batch-first.  A row-major (M, N)
matrix is, byte for byte, the column-major (N, M) matrix of its transpose, so the row-major
product C = op(A) @ op(B) is computed as the column-major product C^T = op(B)^T op(A)^T: the
operands swap places, the transpose flags stay with their matrices, and every leading dimension
is a row stride.  Batched products use ``cublasGemmStridedBatchedEx``.  Storage types float32,
float16 and bfloat16 accumulate in float32 (tensor cores for the 16-bit types); TF32 is used for
float32 only when asked (``allow_tf32``).

The library is found at ``$NEONLITE_CUBLAS``, in the ``nvidia-cublas`` wheel, in the CUDA
toolkit (``$CUDA_HOME``, ``/usr/local/cuda``) or on the loader's path; when it is in none of
them, :func:`load` raises :class:`CublasUnavailable` with the places searched.
"""
import ctypes.util
import glob
import os
import site
import sys
from pathlib import Path

import cffi

CDEF = """
typedef int cublasStatus_t;
typedef void* cublasHandle_t;
typedef void* cudaStream_t;
typedef int cublasOperation_t;
typedef int cudaDataType;
typedef int cublasComputeType_t;
typedef int cublasGemmAlgo_t;
typedef int cublasMath_t;
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void* alpha, const void* A,
    cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
    void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void* alpha, const void* A,
    cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
    long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
    long long strideC, int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo);
"""

OP_N, OP_T = 0, 1
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77
GEMM_DEFAULT = -1
DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3
DATA_TYPES = {"f32": CUDA_R_32F, "f16": CUDA_R_16F, "bf16": CUDA_R_16BF}

STATUS = {0: "SUCCESS", 1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE",
          8: "ARCH_MISMATCH", 11: "MAPPING_ERROR", 13: "EXECUTION_FAILED",
          14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED", 16: "LICENSE_ERROR"}


class CublasUnavailable(ImportError):
    """libcublas could not be found or loaded; the message lists where it was looked for."""


class CublasError(RuntimeError):
    """A cuBLAS call returned an error status."""


def ffi():
    """A cffi FFI with :data:`CDEF` parsed."""
    f = cffi.FFI()
    f.cdef(CDEF)
    return f


def candidates():
    """Paths to try for libcublas, in order (existing files only, plus the loader's name)."""
    found = []
    env = os.environ.get("NEONLITE_CUBLAS", "").strip()
    if env:
        found.append(env)
    roots = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]] + \
        [Path(p) for p in sys.path if p.endswith("site-packages")]
    for root in dict.fromkeys(roots):
        for pattern in ("nvidia/cublas/lib/libcublas.so*", "nvidia/cu*/lib/libcublas.so*"):
            found += sorted(glob.glob(str(root / pattern)), reverse=True)
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            found += sorted(glob.glob(str(Path(home) / sub / "libcublas.so*")), reverse=True)
    name = ctypes.util.find_library("cublas")
    if name:
        found.append(name)
    return [p for p in dict.fromkeys(found) if not p.endswith(".so.alt")]


def load():
    """``(ffi, lib)`` for the first libcublas that loads; :class:`CublasUnavailable` if none."""
    f = ffi()
    tried = []
    for path in candidates():
        try:
            return f, f.dlopen(path)
        except OSError as err:
            tried.append(f"{path} ({err})")
    where = "; ".join(tried) if tried else "no libcublas in $NEONLITE_CUBLAS, the nvidia-cublas " \
        "wheel, $CUDA_HOME or /usr/local/cuda, nor on the loader's path"
    raise CublasUnavailable(f"cuBLAS could not be loaded: {where}. Install it with "
                            f"'pip install nvidia-cublas' (or set NEONLITE_CUBLAS to libcublas.so)")


def check(status, what):
    if status != 0:
        raise CublasError(f"{what} failed: CUBLAS_STATUS_{STATUS.get(status, status)}")


def matrix_layout(shape, strides):
    """How a cuBLAS call sees a row-major 2-D operand with element ``strides``:
    ``(transposed, ld)`` where ``transposed`` says its memory holds the transpose (a ``.T``
    view).  None when neither axis is unit-stride (the operand must be copied first)."""
    rows, cols = shape
    if strides[1] == 1 or cols == 1:
        return False, max(strides[0] if rows > 1 else cols, cols, 1)
    if strides[0] == 1 or rows == 1:
        return True, max(strides[1] if cols > 1 else rows, rows, 1)
    return None


def gemm_arguments(a, b, c, transA, transB):
    """The (transa, transb, m, n, k, A-operand, B-operand, ldc) of the column-major call that
    computes row-major ``c = op(a) @ op(b)``.  ``a``, ``b``, ``c`` are ``(shape, strides)`` of
    2-D operands (the matrices of one batch entry); returns None when an operand needs a copy.
    The A-operand of the call is ``b`` and its B-operand is ``a``, each as ``(op, ld)``."""
    (a_shape, a_str), (b_shape, b_str), (c_shape, c_str) = a, b, c
    la, lb, lc = matrix_layout(a_shape, a_str), matrix_layout(b_shape, b_str), \
        matrix_layout(c_shape, c_str)
    if la is None or lb is None or lc is None or lc[0]:
        return None
    M, N = c_shape
    K = a_shape[0] if transA else a_shape[1]
    op_a = OP_T if transA != la[0] else OP_N
    op_b = OP_T if transB != lb[0] else OP_N
    return op_b, op_a, N, M, K, (op_b, lb[1]), (op_a, la[1]), lc[1]


class Cublas:
    """One cuBLAS handle bound to a stream (``stream_handle``: the CUstream as an int).

    ``gemm(...)`` takes device pointers and the storage code ('f32', 'f16', 'bf16')."""

    def __init__(self, stream_handle=0, allow_tf32=False):
        self.ffi, self.lib = load()
        handle = self.ffi.new("cublasHandle_t*")
        check(self.lib.cublasCreate_v2(handle), "cublasCreate")
        self.handle = handle[0]
        self._scalars = self.ffi.new("float[2]")
        self.allow_tf32 = allow_tf32
        self.set_stream(stream_handle)
        check(self.lib.cublasSetMathMode(self.handle, TF32_TENSOR_OP_MATH if allow_tf32
                                         else DEFAULT_MATH), "cublasSetMathMode")

    def version(self):
        v = self.ffi.new("int*")
        check(self.lib.cublasGetVersion_v2(self.handle, v), "cublasGetVersion")
        return v[0]

    def set_stream(self, stream_handle):
        check(self.lib.cublasSetStream_v2(self.handle, self.ffi.cast("cudaStream_t",
                                                                      stream_handle)),
              "cublasSetStream")

    def _compute(self, storage):
        if storage == "f32" and self.allow_tf32:
            return COMPUTE_32F_FAST_TF32
        return COMPUTE_32F

    def gemm(self, storage, transa, transb, m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta,
             c_ptr, ldc, batch=1, stride_a=0, stride_b=0, stride_c=0):
        """Column-major ``C = alpha * op(A) @ op(B) + beta * C`` (m x n, inner k), ``batch``
        times with the given element strides between batch entries."""
        dtype = DATA_TYPES[storage]
        self._scalars[0], self._scalars[1] = alpha, beta
        vp = self.ffi.cast
        args = (self.handle, transa, transb, m, n, k, self._scalars, vp("void*", a_ptr))
        if batch == 1:
            status = self.lib.cublasGemmEx(
                *args, dtype, lda, vp("void*", b_ptr), dtype, ldb, self._scalars + 1,
                vp("void*", c_ptr), dtype, ldc, self._compute(storage), GEMM_DEFAULT)
            check(status, f"cublasGemmEx(m={m}, n={n}, k={k}, {storage})")
        else:
            status = self.lib.cublasGemmStridedBatchedEx(
                *args, dtype, lda, stride_a, vp("void*", b_ptr), dtype, ldb, stride_b,
                self._scalars + 1, vp("void*", c_ptr), dtype, ldc, stride_c, batch,
                self._compute(storage), GEMM_DEFAULT)
            check(status, f"cublasGemmStridedBatchedEx(m={m}, n={n}, k={k}, batch={batch}, "
                          f"{storage})")

    def close(self):
        if self.handle is not None:
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = None
