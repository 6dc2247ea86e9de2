"""GEMMs through Intel MKL's CBLAS, when the ``mkl`` wheel is installed (``neonlite[mkl]``).

MKL is the BLAS PyTorch's CPU build uses; on x86 it is faster than numpy's OpenBLAS for the
thin and batched products of convolution and attention.  :class:`MKLGemm` has the same
``matmul(a, b, out)`` as :class:`~neonlite.backends.cpu.blas.GemmThreads` (out = a @ b, numpy
semantics for 2-D and 3-D float32/float64 arrays) and calls ``cblas_?gemm`` or
``cblas_?gemm_batch_strided`` on the arrays in place: a transposed view becomes a transpose
flag, a broadcast batch a zero batch stride.  Anything CBLAS cannot take without a copy
(float16, a view without a unit stride) goes to ``numpy.matmul``.

Each GEMM runs on one MKL thread or on all of them, whichever its shape was measured to run
faster (the :class:`~neonlite.backends.cpu.blas.WayTuner` of ``cpu_blas``, through MKL's
per-calling-thread ``MKL_Set_Num_Threads_Local``); GEMMs below ``cpu_blas.TINY_MACS``
multiply-adds always take one.  Small products (a transformer's 768 x 128 @ 128 x 512 at
batch 12 x 64 tokens) lose to the threads' synchronization, more so on a busy machine.

MKL is loaded with its GNU OpenMP threading layer (``MKL_THREADING_LAYER=GNU`` unless the user
chose one), so it shares one OpenMP runtime with neonlite's C kernels.  ``NEONLITE_BLAS=numpy``
turns it off.

A GEMM with a long inner dimension can give other bits on one thread than on two (MKL splits
the sums), so which way the tuner picked shows in the last bits.  ``NEONLITE_DETERMINISTIC=1``
puts MKL in its strict reproducible mode (``MKL_CBWR_Set(AUTO | STRICT)``, on neonlite's MKL
only, when it loads it): the same bits on any thread count, for a few percent of GEMM speed.
"""
import ctypes.util
import functools
import glob
import os
import sys

import time
import warnings

import numpy as np

from .blas import TINY_MACS, WayTuner

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
#: MKL_CBWR_AUTO | MKL_CBWR_STRICT, and MKL_CBWR_ALL (every CNR setting) for MKL_CBWR_Get
_CBWR_AUTO_STRICT, _CBWR_ALL = 0x10002, -1
_A_MATRIX, _B_MATRIX = 161, 162
_CDEF = """
int MKL_Set_Num_Threads_Local(int);
int MKL_CBWR_Set(const int);
int MKL_CBWR_Get(const int);
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *,
                 int, double, double *, int);
void cblas_sgemm_batch_strided(int, int, int, int, int, int, float, const float *, int,
                               long long, const float *, int, long long, float, float *, int,
                               long long, int);
size_t cblas_sgemm_pack_get_size(int, int, int, int);
size_t cblas_dgemm_pack_get_size(int, int, int, int);
void cblas_sgemm_pack(int, int, int, int, int, int, float, const float *, int, float *);
void cblas_dgemm_pack(int, int, int, int, int, int, double, const double *, int, double *);
void cblas_sgemm_compute(int, int, int, int, int, int, const float *, int, const float *, int,
                         float, float *, int);
void cblas_dgemm_compute(int, int, int, int, int, int, const double *, int, const double *,
                         int, double, double *, int);
void cblas_dgemm_batch_strided(int, int, int, int, int, int, double, const double *, int,
                               long long, const double *, int, long long, double, double *,
                               int, long long, int);
"""


def _check_product_shapes(a, b, out):
    """Raise ValueError unless ``out`` (.., m, n) is the shape of ``a`` (.., m, k) @ ``b``
    (.., k, n), batch axes broadcasting as in numpy.matmul: CBLAS takes the sizes on trust,
    so a mismatch would read and write outside the arrays."""
    fits = len(a) >= 2 and len(b) >= 2 and len(out) >= 2 and a[-1] == b[-2]
    if fits:
        try:
            batch = np.broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            fits = False
        else:
            fits = tuple(out) == tuple(batch) + (a[-2], b[-1])
    if not fits:
        raise ValueError(f"matrix product: {tuple(a)} @ {tuple(b)} into an output of shape "
                         f"{tuple(out)}; expected (.., m, k) @ (.., k, n) into (.., m, n)")


def _candidates():
    """MKL runtime libraries, newest first: this environment's own (``sys.prefix``), then its
    base interpreter's (a venv made with ``--system-site-packages`` sees the base's ``mkl``
    package), then the system's."""
    found = ctypes.util.find_library("mkl_rt")
    prefixes = dict.fromkeys((sys.prefix, sys.base_prefix))
    paths = [path for prefix in prefixes for path in
             sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")), reverse=True)]
    return paths + ([found] if found else [])


@functools.lru_cache(maxsize=None)
def load_mkl():
    """(ffi, lib) for MKL's runtime library, or None when it is absent or turned off."""
    if os.environ.get("NEONLITE_BLAS", "").lower() in ("numpy", "openblas", "0", "off"):
        return None
    try:
        import cffi
    except ImportError:
        return None
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    os.environ.setdefault("MKL_THREADING_LAYER", "GNU")
    for path in _candidates():
        try:
            lib = ffi.dlopen(path)
            lib.cblas_sgemm_batch_strided  # noqa: B018 (needs MKL 2020 or newer)
        except (OSError, AttributeError):
            continue
        if deterministic_requested():
            _strict_reproducibility(lib)
        return ffi, lib
    return None


def deterministic_requested():
    """True when ``NEONLITE_DETERMINISTIC`` asks for GEMMs whose bits do not depend on the
    thread count (see the module docstring)."""
    return os.environ.get("NEONLITE_DETERMINISTIC", "").lower() not in ("", "0", "off", "no",
                                                                         "false")


def _strict_reproducibility(lib):
    """MKL's strict CNR mode on ``lib``; MKL takes it only before its first computation, so a
    process that ran MKL GEMMs before gets a warning instead."""
    if lib.MKL_CBWR_Get(_CBWR_ALL) == _CBWR_AUTO_STRICT:
        return
    status = lib.MKL_CBWR_Set(_CBWR_AUTO_STRICT)
    if status != 0:
        warnings.warn(f"NEONLITE_DETERMINISTIC: MKL refused its strict reproducible mode "
                      f"(MKL_CBWR_Set returned {status}: MKL had already computed in this "
                      f"process); GEMM results may depend on the thread count", RuntimeWarning,
                      stacklevel=3)


def _matrix_layout(shape, strides, itemsize):
    """(transpose flag, leading dimension) describing a (rows, cols) view for row-major CBLAS,
    or None when the view has no unit stride."""
    rows, cols = shape
    s_row, s_col = strides
    if (s_col == itemsize or cols == 1) and s_row % itemsize == 0 and s_row >= 0:
        ld = s_row // itemsize
        if rows == 1 or ld >= cols:
            return _NO_TRANS, max(ld, cols, 1)
    if (s_row == itemsize or rows == 1) and s_col % itemsize == 0 and s_col >= 0:
        ld = s_col // itemsize
        if cols == 1 or ld >= rows:
            return _TRANS, max(ld, rows, 1)
    return None


class MKLGemm:
    """``matmul(a, b, out)`` through MKL (see the module docstring).

    What a call needs besides the data addresses (the CBLAS function, transpose flags, sizes,
    leading dimensions and batch strides, or that numpy must do it) depends only on the
    operands' shapes, strides and dtype; it is worked out the first time a layout is met and
    kept (``_plans``), so a training loop's GEMMs cost one dictionary look-up each in Python."""

    def __init__(self):
        self.ffi, self.lib = load_mkl()
        self.tuner = WayTuner()
        self._plans = {}
        self._pointer_types = {np.dtype(np.float32): self.ffi.typeof("float *"),
                               np.dtype(np.float64): self.ffi.typeof("double *")}

    def matmul(self, a, b, out):
        if not self.matmul_scaled(a, b, out, 1.0, 0.0):
            np.matmul(a, b, out=out)
        return out

    def matmul_scaled(self, a, b, out, alpha, beta):
        """out = alpha * a @ b + beta * out in one MKL call; False, having done nothing, when
        CBLAS cannot take the operands in place (then ``matmul`` falls back to numpy)."""
        key, plan = self._keyed_plan(a, b, out)
        if plan is False:
            return False
        if plan == "empty":
            if beta == 0.0:
                out[...] = 0
            elif beta != 1.0:
                out *= beta
            return True
        self._run(plan, key, out.size * a.shape[-1], self._pointers(a, b, out), alpha, beta)
        return True

    def prepare(self, a, b, out):
        """``run(alpha, beta)``: out = alpha * a @ b + beta * out on these arrays, with the
        plan, the data pointers and the tuner's key worked out now (the caller keeps the arrays
        alive while it keeps ``run``); None where :meth:`matmul_scaled` would not make one
        MKL call of them (numpy's case, an empty product)."""
        key, plan = self._keyed_plan(a, b, out)
        if plan is False or plan == "empty":
            return None
        return functools.partial(self._run, plan, key, out.size * a.shape[-1],
                                 self._pointers(a, b, out))

    def _keyed_plan(self, a, b, out):
        """(the layout's key, its plan: see :meth:`_plan`), the plan made once per key."""
        key = (a.shape, a.strides, b.shape, b.strides, out.shape, out.strides, out.dtype.char,
               a.dtype.char, b.dtype.char)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(a, b, out)
        return key, plan

    def _pointers(self, a, b, out):
        ptr, cast = self._pointer_types[out.dtype], self.ffi.cast
        return tuple(cast(ptr, x.__array_interface__["data"][0]) for x in (a, b, out))

    def _run(self, plan, key, macs, pointers, alpha, beta):
        """One MKL call of ``plan`` on ``pointers`` (a, b, out), on one thread or all, as the
        tuner picks for ``key`` (one below TINY_MACS multiply-adds)."""
        if macs < TINY_MACS:
            way = "one"
        else:
            way = self.tuner.pick(key, lambda: ("one", "all"))
            start = time.perf_counter()
        previous = self.lib.MKL_Set_Num_Threads_Local(1) if way == "one" else None
        try:
            function, args, batched = plan
            pa, pb, pc = pointers
            if batched:
                (ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, count) = args
                function(_ROW_MAJOR, ta, tb, m, n, k, alpha, pa, lda, sa, pb, ldb, sb, beta, pc,
                         ldc, sc, count)
            else:
                (ta, tb, m, n, k, lda, ldb, ldc) = args
                function(_ROW_MAJOR, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc)
        finally:
            if previous is not None:
                self.lib.MKL_Set_Num_Threads_Local(previous)
        if macs >= TINY_MACS:
            self.tuner.record(key, way, time.perf_counter() - start)

    def _plan(self, a, b, out):
        """(CBLAS function, its arguments but the addresses and scales, batched?), "empty" for a
        product with a zero size, or False when CBLAS cannot take the operands."""
        dtype = out.dtype
        if dtype not in (np.float32, np.float64) or a.dtype != dtype or b.dtype != dtype:
            return False
        _check_product_shapes(a.shape, b.shape, out.shape)
        if a.ndim == b.ndim == out.ndim == 2:
            return self._gemm(a, b, out)
        if out.ndim == 3 and a.ndim in (2, 3) and b.ndim in (2, 3):
            return self._batched(a, b, out)
        return False

    def _gemm(self, a, b, out):
        it = out.itemsize
        la, lb = _matrix_layout(a.shape, a.strides, it), _matrix_layout(b.shape, b.strides, it)
        lc = _matrix_layout(out.shape, out.strides, it)
        if None in (la, lb, lc) or lc[0] != _NO_TRANS:
            return False
        (m, k), n = a.shape, b.shape[1]
        if 0 in (m, n, k):
            return "empty"
        gemm = self.lib.cblas_sgemm if out.dtype == np.float32 else self.lib.cblas_dgemm
        return gemm, (la[0], lb[0], m, n, k, la[1], lb[1], lc[1]), False

    def _batched(self, a, b, out):
        it, batch = out.itemsize, out.shape[0]
        views = []
        for x in (a, b):
            if x.ndim == 2:
                views.append((x.shape, x.strides, 0))
            elif x.shape[0] in (1, batch):
                views.append((x.shape[1:], x.strides[1:],
                              0 if x.shape[0] == 1 else x.strides[0]))
            else:
                return False
        (sa, ta, ba), (sb, tb, bb) = views
        la, lb = _matrix_layout(sa, ta, it), _matrix_layout(sb, tb, it)
        lc = _matrix_layout(out.shape[1:], out.strides[1:], it)
        if (None in (la, lb, lc) or lc[0] != _NO_TRANS or ba % it or bb % it
                or out.strides[0] % it or out.strides[0] < 0 or ba < 0 or bb < 0):
            return False
        (m, k), n = sa, sb[1]
        if 0 in (m, n, k, batch):
            return "empty"
        gemm = (self.lib.cblas_sgemm_batch_strided if out.dtype == np.float32
                else self.lib.cblas_dgemm_batch_strided)
        return gemm, (la[0], lb[0], m, n, k, la[1], ba // it, lb[1], bb // it, lc[1],
                      out.strides[0] // it, batch), True

    def gemm_address(self, dtype):
        """The address of MKL's row-major ``cblas_sgemm`` (float32) or ``cblas_dgemm``
        (float64), for C kernels that call it from their own threads; None for other dtypes."""
        name = {np.dtype(np.float32): "cblas_sgemm", np.dtype(np.float64): "cblas_dgemm"}.get(
            np.dtype(dtype))
        return None if name is None else int(self.ffi.cast("intptr_t", getattr(self.lib, name)))

    def thread_setter_address(self):
        """The address of ``MKL_Set_Num_Threads_Local``, for C kernels that run MKL on one
        thread around their own calls."""
        return int(self.ffi.cast("intptr_t", self.lib.MKL_Set_Num_Threads_Local))

    def packed_gemm(self, dtype):
        """For C kernels that multiply by the same matrix many times: ``(pack address, compute
        address, size)`` of MKL's ``cblas_?gemm_pack`` and ``cblas_?gemm_compute`` for float32
        or float64, where ``size(m, n, k)`` is the elements of the packed B matrix of an
        (m, k) @ (k, n) product (``size(m, n, k, "A")``: of its packed A matrix); None for
        other dtypes or an MKL without them."""
        prefix = {np.dtype(np.float32): "cblas_s", np.dtype(np.float64): "cblas_d"}.get(
            np.dtype(dtype))
        if prefix is None:
            return None
        try:
            pack, compute, size = (getattr(self.lib, f"{prefix}gemm_{name}")
                                   for name in ("pack", "compute", "pack_get_size"))
        except AttributeError:
            return None
        itemsize = np.dtype(dtype).itemsize

        def elements(m, n, k, matrix="B"):
            identifier = {"A": _A_MATRIX, "B": _B_MATRIX}[matrix]
            return -(-int(size(identifier, m, n, k)) // itemsize)
        return (int(self.ffi.cast("intptr_t", pack)), int(self.ffi.cast("intptr_t", compute)),
                elements)

