"""The CPU backend's compiled kernels: C with OpenMP (``kernels/cpu/*.c``) called through cffi,
with numpy's BLAS for the GEMMs.

Every method takes numpy arrays and returns True when it did the work, or False when the case
is not one the C kernels take (a dtype other than float32/float64, a non-contiguous array, no
compiled kernels), in which case the backend runs its numpy reference instead.

The kernels of a source are built (or loaded from the kernel cache) the first time one of them
is needed.  Where they cannot be built (no C compiler, or ``NEONLITE_CPU_KERNELS=0``) the
backend runs on numpy alone and says so once per process, in one line, on the ``neonlite``
logger.

Convolution runs the direct kernels of ``kernels/cpu/conv_direct.c`` (no patches; see
``_direct`` for the shapes they take: on LeNet's and the 3x3 benchmark's they beat patches +
GEMM 1.5-3x).  Other shapes, where CBLAS comes from MKL, run the tiled C passes of
``kernels/cpu/conv.c``:
each OpenMP thread gathers a few patch rows (about ``_TILE_BYTES``) into its own buffer and
multiplies them there with a single-threaded MKL GEMM, so the (N*P*Q, R*S*C) patch matrix,
R*S times the size of the input, is never written to memory and no thread waits on another
inside a GEMM.  Without MKL it gathers the patches of the batch (``im2col``) into one matrix and
runs one BLAS GEMM per pass; ``update_conv`` then reuses the patches its ``fprop_conv`` gathered
from the same input (the backend contract: the input of ``update_conv`` is the input of the
latest ``fprop_conv`` with that plan, unchanged since; the numpy reference gathers again), and
the data gradient is the transposed GEMM followed by a scatter-add (``col2im``).  A batch whose
patch matrix would pass ``_PATCH_BYTES`` is worked through in chunks of whole images.  Work
buffers live on the plan and are made on its first use.
"""
import contextlib
import logging
import os

import numpy as np

from .cpu_blas import GemmThreads
from .mkl_blas import MKLGemm, load_mkl
from .numpy_conv import _accumulate, _is_pointwise

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_PATCH_BYTES = 256 << 20
_TILE_BYTES = 384 << 10
_DIRECT_BLOCK_BYTES = 256 << 10
_logger = logging.getLogger("neonlite")
#: numpy alone against the C kernels, samples/s of the quick start (measured:
#: docs/architecture.md, "CPU data types")
NUMPY_SLOWDOWN = 5


@contextlib.contextmanager
def _passive_openmp():
    """Load kernels with ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose a policy.

    OpenMP reads the policy once, when its runtime loads with the first kernel module.  Idle
    OpenMP threads that spin would take the cores from numpy's BLAS threads, which run between
    the kernels; sleeping ones cost a few microseconds to wake per parallel loop.  The variable
    is set only while the module loads, so other libraries' OpenMP runtimes keep their defaults.
    """
    if "OMP_WAIT_POLICY" in os.environ:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


def _address(a):
    """The address of ndarray ``a``'s first element."""
    return a.ctypes.data


def _contiguous(*arrays):
    dtype = arrays[0].dtype
    return dtype in _FLOATS and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays)


class CPUKernels:
    """Lazily built C kernels for one CPU backend (see the module docstring).

    ``builder`` is a :class:`~neonlite.kernels.build.Builder` (default: the process's);
    ``gemm`` runs the GEMMs: MKL's CBLAS when the ``mkl`` wheel is installed
    (:class:`~neonlite.backends.mkl_blas.MKLGemm`), else numpy's BLAS with per-shape thread
    tuning (:class:`~neonlite.backends.cpu_blas.GemmThreads`).
    """

    def __init__(self, builder=None, gemm=None):
        self._builder = builder
        self._modules = {}
        self._prepared = set()
        self._bad_index = np.zeros(1, dtype=np.int64)
        self.workspaces = {}
        if gemm is None:
            gemm = MKLGemm() if load_mkl() is not None else GemmThreads()
        self.gemm = gemm

    @property
    def builder(self):
        if self._builder is None:
            from ..kernels.build import default_builder
            self._builder = default_builder()
        return self._builder

    def unavailable_reason(self):
        """Why the kernels cannot be built here (None while nothing has failed)."""
        if os.environ.get("NEONLITE_CPU_KERNELS", "").strip() == "0":
            return "NEONLITE_CPU_KERNELS=0"
        return self.builder.unavailable.get("cpu")

    def active(self, dtype=np.float32):
        """True when the kernels for ``dtype`` are built and in use (builds them if needed)."""
        return self.module("optree", np.dtype(dtype)) is not None

    def module(self, stem, dtype):
        """The cffi module of C source ``stem`` for ``dtype``, or None (numpy must run)."""
        found = self._modules.get((stem, dtype))
        if found is not None or dtype not in _FLOATS:
            return found
        if self.unavailable_reason() is not None:
            self._say_unavailable()
            return None
        from ..kernels.specs import cpu_variant
        from ..kernels.toolchain import CompileError, CompilerNotFound
        self.prepare(dtype)
        if self.unavailable_reason() is not None:
            return None
        try:
            with _passive_openmp():
                found = self.builder.load_cpu(cpu_variant(stem, dtype))
        except CompilerNotFound as err:
            self._mark_unavailable(str(err))
            return None
        except (CompileError, ImportError, OSError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            self._mark_unavailable(f"{first} (`python -m neonlite.kernels.cli build` shows the "
                                   f"compiler log)")
            return None
        self._modules[(stem, dtype)] = found
        return found

    def prepare(self, dtype):
        """Build, at once and after one notice on stderr, every C kernel for ``dtype`` that the
        cache does not hold yet (:func:`~neonlite.kernels.first_use.compile_missing`), so the
        first training steps do not stop to compile one source after another."""
        dtype = np.dtype(dtype)
        if dtype not in _FLOATS or dtype in self._prepared or self.unavailable_reason():
            return
        self._prepared.add(dtype)
        from ..kernels.first_use import compile_missing
        from ..kernels.specs import CPU_SOURCES, cpu_variant
        from ..kernels.toolchain import CompilerNotFound
        try:
            compile_missing(self.builder, [cpu_variant(stem, dtype) for stem in CPU_SOURCES])
        except CompilerNotFound as err:
            self._mark_unavailable(str(err))

    def _mark_unavailable(self, reason):
        self.builder.unavailable["cpu"] = reason
        self._say_unavailable()

    def _say_unavailable(self):
        if "cpu" not in self.builder.announced:
            self.builder.announced.add("cpu")
            _logger.warning("neonlite: the cpu backend runs without its compiled kernels "
                            "(numpy only, about %d times slower): %s", NUMPY_SLOWDOWN,
                            self.unavailable_reason())

    def _usable(self, stem, *arrays):
        if not _contiguous(*arrays):
            return None
        return self.module(stem, arrays[0].dtype)

    def block_sums_work(self, module, function, dtype, rows, cols):
        """The float64 work array (1-D) that C function ``function`` of ``module`` (the kernels
        for ``dtype``) takes for its sums of ``cols`` columns over ``rows`` rows in row blocks
        (``nl_block_sums_size`` in ``kernels/cpu/common.h``, plus what the function needs
        besides): as long as ``<function>_work_size(rows, cols)`` says.

        Kept in ``workspaces``, so a training loop allocates it once: the key is (function,
        dtype, cols, length), and the length depends on ``rows`` only through the number of
        row blocks (``nl_blocks(rows)``, at most 32), so it names what determines the size.
        The kernels only use it during a call and need no particular contents."""
        size = int(getattr(module.lib, f"{function}_work_size")(rows, cols))
        key = (function, np.dtype(dtype), int(cols), size)
        work = self.workspaces.get(key)
        if work is None:
            work = self.workspaces[key] = np.empty(size, dtype=np.float64)
        return work

    # ---- convolution -------------------------------------------------------------------------
    def _conv_geom(self, plan, module, n):
        """The plan's ``conv_geom`` struct for a batch of ``n`` images."""
        found = getattr(plan, "_ckernel_geom", None)
        if found is None or found[0] is not module:
            geom = module.ffi.new("conv_geom *", {
                "N": plan.N, "H": plan.H, "W": plan.W, "C": plan.C, "P": plan.P, "Q": plan.Q,
                "R": plan.R, "S": plan.S, "pad_h": plan.pad_h, "pad_w": plan.pad_w,
                "str_h": plan.str_h, "str_w": plan.str_w, "dil_h": plan.dil_h,
                "dil_w": plan.dil_w, "K": plan.K})
            found = plan._ckernel_geom = (module, geom)
        found[1].N = n
        return found[1]

    def _conv_work(self, plan, module, dtype):
        """(patch buffer, weight-gradient buffer, images per chunk) of the whole-matrix path."""
        work = getattr(plan, "_ckernel_conv", None)
        if work is not None and work[0] is module:
            return work[1:]
        row = plan.R * plan.S * plan.C
        image_bytes = plan.P * plan.Q * row * dtype.itemsize
        per_chunk = int(max(1, min(plan.N, _PATCH_BYTES // max(image_bytes, 1))))
        cols = np.empty((per_chunk * plan.P * plan.Q, row), dtype=dtype)
        dw = np.empty((row, plan.K), dtype=dtype)
        plan._ckernel_conv = (module, cols, dw, per_chunk)
        return plan._ckernel_conv[1:]

    def _tiles(self, plan, module, dtype):
        """(gemm address, work, partials, nwork, tile) of the tiled passes (see the module
        docstring), or None where the GEMMs do not come from MKL or the filter is 1x1."""
        address = getattr(self.gemm, "gemm_address", None)
        address = None if address is None or _is_pointwise(plan) else address(dtype)
        if address is None:
            return None
        found = getattr(plan, "_ckernel_tiles", None)
        if found is not None and found[0] is module:
            return found[1:]
        nwork = max(1, int(module.lib.conv_threads()))
        row = plan.R * plan.S * plan.C
        tile = int(max(1, _TILE_BYTES // (plan.Q * row * dtype.itemsize)))
        work = np.empty(nwork * tile * plan.Q * row, dtype=dtype)
        partials = np.empty(nwork * row * plan.K, dtype=dtype)
        plan._ckernel_tiles = (module, address, work, partials, nwork, tile)
        return plan._ckernel_tiles[1:]

    def _direct(self, plan, dtype, transposed=False):
        """(module, geom, work, partials, nwork, flipped filter) of the direct kernels
        (``kernels/cpu/conv_direct.c``) for ``plan``, or None where they do not apply: 1x1
        filters (a plain GEMM), output channels that are not a whole number of vector registers,
        or a filter block (R*S*C x four registers of output channels) beyond
        ``_DIRECT_BLOCK_BYTES``, where it would stream from L2.  ``transposed`` asks for the
        data gradient, the forward convolution of the output gradient (N, P, Q, K) with the
        filters flipped and transposed to (R, S, K, C), padded by dil*(R-1) - pad: stride 1
        only."""
        c_in, c_out = (plan.K, plan.C) if transposed else (plan.C, plan.K)
        if _is_pointwise(plan):
            return None
        if transposed:
            pads = (plan.dil_h * (plan.R - 1) - plan.pad_h, plan.dil_w * (plan.S - 1) - plan.pad_w)
            if plan.str_h != 1 or plan.str_w != 1 or min(pads) < 0:
                return None
        module, conv = self.module("conv_direct", dtype), self.module("conv", dtype)
        if module is None or conv is None:
            return None
        width = int(module.lib.conv_direct_width())
        if (c_out % width or plan.R * plan.S * c_in * min(c_out, 4 * width) * dtype.itemsize
                > _DIRECT_BLOCK_BYTES):
            return None
        cache = getattr(plan, "_ckernel_direct", None)
        if cache is None:
            cache = plan._ckernel_direct = {}
        found = cache.get(transposed)
        if found is not None and found[0] is module:
            return found
        if transposed:
            dims = {"H": plan.P, "W": plan.Q, "C": plan.K, "P": plan.H, "Q": plan.W,
                    "K": plan.C, "pad_h": pads[0], "pad_w": pads[1], "str_h": 1, "str_w": 1}
        else:
            dims = {"H": plan.H, "W": plan.W, "C": plan.C, "P": plan.P, "Q": plan.Q,
                    "K": plan.K, "pad_h": plan.pad_h, "pad_w": plan.pad_w, "str_h": plan.str_h,
                    "str_w": plan.str_w}
        geom = module.ffi.new("conv_geom *", {"N": plan.N, "R": plan.R, "S": plan.S,
                                                "dil_h": plan.dil_h, "dil_w": plan.dil_w, **dims})
        nwork = max(1, int(conv.lib.conv_threads()))
        padded = (dims["H"] + 2 * dims["pad_h"]) * (dims["W"] + 2 * dims["pad_w"]) * dims["C"]
        work = np.empty(nwork * padded, dtype=dtype)
        partials = None if transposed else np.empty(2 * nwork * plan.R * plan.S * plan.C
                                                    * plan.K, dtype=dtype)
        flipped = np.empty((plan.R, plan.S, plan.K, plan.C), dtype=dtype) if transposed else None
        found = cache[transposed] = (module, geom, work, partials, nwork, flipped)
        return found

    @staticmethod
    def _chunks(n, per_chunk):
        return ((n0, min(n, n0 + per_chunk)) for n0 in range(0, n, per_chunk))

    def fprop_conv(self, plan, x, f, o, bias=None, relu=False):
        """o (N, P, Q, K) = conv(x (N, H, W, C), f (R, S, C, K)) (+ bias (K,), then ReLU when
        ``relu``: the epilogue runs on each block of output rows while it is in cache, or, after
        a whole-matrix GEMM, as one more pass)."""
        arrays = (x, f, o) if bias is None else (x, f, o, bias)
        module = self._usable("conv", *arrays)
        if module is None:
            return False
        K, PQ = plan.K, plan.P * plan.Q
        f2, o2 = f.reshape(-1, K), o.reshape(-1, K)
        ffi, lib = module.ffi, module.lib
        bias_ptr = ffi.NULL if bias is None else ffi.from_buffer("real[]", bias)
        relu = int(bool(relu))
        plan._ckernel_patches_of = None
        if _is_pointwise(plan):
            self.gemm.matmul(x.reshape(-1, plan.C), f2, out=o2)
            lib.conv_bias_relu(ffi.from_buffer("real[]", o), o2.shape[0], K, bias_ptr, relu)
            return True
        direct = self._direct(plan, x.dtype)
        if direct is not None:
            dmod, dgeom, work, _, nwork, _ = direct
            dgeom.N = x.shape[0]
            buf = dmod.ffi.from_buffer
            dbias = dmod.ffi.NULL if bias is None else buf("real[]", bias)
            dmod.lib.conv_direct(buf("real[]", x), buf("real[]", f), buf("real[]", o), dgeom,
                                 buf("real[]", work), nwork, 0.0, dbias, relu)
            return True
        geom = self._conv_geom(plan, module, x.shape[0])
        tiles = self._tiles(plan, module, x.dtype)
        if tiles is not None:
            address, work, _, nwork, tile = tiles
            lib.conv_fprop_tiled(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", f),
                                 ffi.from_buffer("real[]", o), geom, address,
                                 ffi.from_buffer("real[]", work), nwork, tile, bias_ptr, relu)
            return True
        cols, _, per_chunk = self._conv_work(plan, module, x.dtype)
        xp, cp = ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", cols)
        op = ffi.from_buffer("real[]", o)
        for n0, n1 in self._chunks(x.shape[0], per_chunk):
            lib.im2col(xp, cp, geom, n0, n1)
            self.gemm.matmul(cols[:(n1 - n0) * PQ], f2, out=o2[n0 * PQ:n1 * PQ])
            lib.conv_bias_relu(op + n0 * PQ * K, (n1 - n0) * PQ, K, bias_ptr, relu)
        whole = x.shape[0] <= per_chunk
        plan._ckernel_patches_of = (_address(x), x.shape) if whole else None
        return True

    def update_conv(self, plan, x, e, grad_f, beta=0.0):
        """grad_f (R, S, C, K) = beta * grad_f + patches(x)^T @ e (N*P*Q, K)."""
        module = self._usable("conv", x, e, grad_f)
        if module is None:
            return False
        K, PQ = plan.K, plan.P * plan.Q
        e2, g2 = e.reshape(-1, K), grad_f.reshape(-1, K)
        direct = self._direct(plan, x.dtype)
        if direct is not None:
            dmod, dgeom, work, partials, nwork, _ = direct
            dgeom.N = x.shape[0]
            buf = dmod.ffi.from_buffer
            dmod.lib.conv_direct_update(buf("real[]", x), buf("real[]", e),
                                        buf("real[]", grad_f), dgeom, buf("real[]", work),
                                        buf("real[]", partials), nwork, beta)
            return True
        ffi, lib = module.ffi, module.lib
        geom = self._conv_geom(plan, module, x.shape[0])
        tiles = self._tiles(plan, module, x.dtype)
        if tiles is not None:
            address, work, partials, nwork, tile = tiles
            lib.conv_update_tiled(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", e),
                                  ffi.from_buffer("real[]", grad_f), geom, address,
                                  ffi.from_buffer("real[]", work),
                                  ffi.from_buffer("real[]", partials), nwork, tile, beta)
            return True
        cols, dw, per_chunk = self._conv_work(plan, module, x.dtype)
        if _is_pointwise(plan):
            self.gemm.matmul(x.reshape(-1, plan.C).T, e2, out=dw)
            _accumulate(g2, dw, beta)
            return True
        if getattr(plan, "_ckernel_patches_of", None) == (_address(x), x.shape):
            self.gemm.matmul(cols[:x.shape[0] * PQ].T, e2, out=dw)
            _accumulate(g2, dw, beta)
            return True
        xp, cp = ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", cols)
        for i, (n0, n1) in enumerate(self._chunks(x.shape[0], per_chunk)):
            lib.im2col(xp, cp, geom, n0, n1)
            self.gemm.matmul(cols[:(n1 - n0) * PQ].T, e2[n0 * PQ:n1 * PQ], out=dw)
            _accumulate(g2, dw, beta if i == 0 else 1.0)
        plan._ckernel_patches_of = None
        return True

    def bprop_conv(self, plan, f, e, grad_x, beta=0.0):
        """grad_x (N, H, W, C) = beta * grad_x + data gradient of e (N, P, Q, K) through f."""
        module = self._usable("conv", f, e, grad_x)
        if module is None:
            return False
        K, PQ = plan.K, plan.P * plan.Q
        e2, fT = e.reshape(-1, K), f.reshape(-1, K).T
        plan._ckernel_patches_of = None
        direct = self._direct(plan, e.dtype, transposed=True)
        if direct is not None:
            dmod, dgeom, work, _, nwork, flipped = direct
            np.copyto(flipped, f[::-1, ::-1].transpose(0, 1, 3, 2))
            dgeom.N = e.shape[0]
            buf = dmod.ffi.from_buffer
            dmod.lib.conv_direct(buf("real[]", e), buf("real[]", flipped),
                                 buf("real[]", grad_x), dgeom, buf("real[]", work), nwork, beta,
                                 dmod.ffi.NULL, 0)
            return True
        ffi, lib = module.ffi, module.lib
        geom = self._conv_geom(plan, module, e.shape[0])
        tiles = self._tiles(plan, module, e.dtype)
        if tiles is not None:
            address, work, _, nwork, tile = tiles
            lib.conv_bprop_tiled(ffi.from_buffer("real[]", e), ffi.from_buffer("real[]", f),
                                 ffi.from_buffer("real[]", grad_x), geom, address,
                                 ffi.from_buffer("real[]", work), nwork, tile, beta)
            return True
        cols, _, per_chunk = self._conv_work(plan, module, e.dtype)
        if _is_pointwise(plan):
            gx = grad_x.reshape(-1, plan.C)
            if beta == 0.0:
                self.gemm.matmul(e2, fT, out=gx)
                return True
            for n0, n1 in self._chunks(e.shape[0], per_chunk):
                rows = slice(n0 * PQ, n1 * PQ)
                self.gemm.matmul(e2[rows], fT, out=cols[:(n1 - n0) * PQ])
                _accumulate(gx[rows], cols[:(n1 - n0) * PQ], beta)
            return True
        gp, cp = ffi.from_buffer("real[]", grad_x), ffi.from_buffer("real[]", cols)
        for n0, n1 in self._chunks(e.shape[0], per_chunk):
            self.gemm.matmul(e2[n0 * PQ:n1 * PQ], fT, out=cols[:(n1 - n0) * PQ])
            lib.col2im(cp, gp, geom, n0, n1, beta)
        return True

    # ---- pooling -----------------------------------------------------------------------------
    def _pool_work(self, plan, module, n):
        work = getattr(plan, "_ckernel_pool", None)
        if work is not None and work[0] is module and work[1].N == n:
            return work[1:]
        geom = module.ffi.new("pool_geom *", {
            "N": n, "H": plan.H, "W": plan.W, "C": plan.C, "P": plan.P, "Q": plan.Q,
            "R": plan.R, "S": plan.S, "pad_h": plan.pad_h, "pad_w": plan.pad_w,
            "str_h": plan.str_h, "str_w": plan.str_w})
        argmax = np.zeros((n, plan.P, plan.Q, plan.C), dtype=np.int32)
        plan._ckernel_pool = (module, geom, argmax)
        return plan._ckernel_pool[1:]

    def fprop_pool(self, plan, x, o):
        """o (N, P, Q, C) = max or average pooling of x (N, H, W, C); max records argmax."""
        plan._ckernel_argmax_fresh = False
        module = self._usable("pool", x, o)
        if module is None:
            return False
        geom, argmax = self._pool_work(plan, module, x.shape[0])
        ffi, lib = module.ffi, module.lib
        if plan.op == "max":
            lib.maxpool_fprop(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", o),
                              ffi.from_buffer("int32_t[]", argmax), geom)
            plan._ckernel_argmax_fresh = True
        else:
            lib.avgpool_fprop(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", o), geom)
        return True

    def bprop_pool(self, plan, e, grad_x, beta=0.0):
        """grad_x (N, H, W, C) = beta * grad_x + e (N, P, Q, C) routed back through the
        windows (max: to the argmax of the last C fprop_pool)."""
        if plan.op == "max" and not getattr(plan, "_ckernel_argmax_fresh", False):
            return False
        module = self.module("pool", e.dtype)
        if module is None or grad_x.dtype != e.dtype:
            return False
        e = np.ascontiguousarray(e)
        target = grad_x if grad_x.flags.c_contiguous else np.ascontiguousarray(grad_x)
        geom, argmax = self._pool_work(plan, module, e.shape[0])
        ffi, lib = module.ffi, module.lib
        if plan.op == "max":
            lib.maxpool_bprop(ffi.from_buffer("real[]", e), ffi.from_buffer("int32_t[]", argmax),
                              ffi.from_buffer("real[]", target), geom, beta)
        else:
            lib.avgpool_bprop(ffi.from_buffer("real[]", e), ffi.from_buffer("real[]", target),
                              geom, beta)
        if target is not grad_x:
            np.copyto(grad_x, target)
        return True

    # ---- normalization and softmax ----------------------------------------------------------
    def _norm_work(self, module, dtype, rows, cols):
        """The ``work`` pointer of the norm kernels for (rows, cols) (see ``kernels/cpu/norm.h``),
        kept in ``workspaces``."""
        return module.ffi.from_buffer("double[]",
                                      self.block_sums_work(module, "norm", dtype, rows, cols))

    def batchnorm_fprop(self, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                        eps, momentum, inference, relu=False):
        """Batch norm of x (M, C) over its rows (see ``Backend.batchnorm_fprop``), then
        y = max(y, 0) when ``relu``."""
        arrays = (x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var)
        module = self._usable("norm", *arrays)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays]
        M, C = x.shape
        if inference:
            module.lib.batchnorm_fprop_infer(*ptrs, M, C, eps, bool(relu))
        else:
            module.lib.batchnorm_fprop_train(*ptrs, self._norm_work(module, x.dtype, M, C), M, C,
                                             eps, momentum, bool(relu))
        return True

    def batchnorm_moments(self, x, mean, m2):
        """mean, m2 (C,) float64 = per-channel mean and sum of squared deviations of the rows
        of x (M, C)."""
        module = self._usable("norm", x)
        if module is None or mean.dtype != np.float64 or m2.dtype != np.float64:
            return False
        ffi = module.ffi
        module.lib.batchnorm_moments(ffi.from_buffer("real[]", x), x.shape[0], x.shape[1],
                                     ffi.from_buffer("double[]", mean),
                                     ffi.from_buffer("double[]", m2),
                                     self._norm_work(module, x.dtype, *x.shape))
        return True

    def batchnorm_apply(self, x, gamma, beta, y, xhat, mean, invstd, relu=False):
        """xhat = (x - mean) * invstd, y = gamma * xhat + beta (then max(y, 0) with relu)."""
        arrays = (x, gamma, beta, y, xhat, mean, invstd)
        module = self._usable("norm", *arrays)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays]
        module.lib.batchnorm_apply(*ptrs, x.shape[0], x.shape[1], bool(relu))
        return True

    def batchnorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, beta_acc=0.0, y=None):
        """dx (M, C), and dgamma, dbeta (1, C) accumulated into; ``y`` (M, C), the output of a
        fprop with ``relu``, masks dy by y > 0."""
        arrays = (dy, xhat, invstd, gamma, dx, dgamma, dbeta) + (() if y is None else (y,))
        module = self._usable("norm", *arrays)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in arrays[:7]]
        mask = module.ffi.NULL if y is None else module.ffi.from_buffer("real[]", y)
        module.lib.batchnorm_bprop(*ptrs, self._norm_work(module, dy.dtype, *dy.shape),
                                   dy.shape[0], dy.shape[1], beta_acc, mask)
        return True

    def layernorm_fprop(self, x, gamma, beta, y, xhat, invstd, eps, residual=None, total=None):
        """Layer norm of x (M, D) over its last axis; invstd (M, 1).  With ``residual`` and
        ``total`` (M, D): total = x + residual, normalized in x's place."""
        arrays = (x, gamma, beta, y, xhat, invstd)
        joined = () if residual is None else (residual, total)
        module = self._usable("norm", *arrays, *joined)
        if module is None or (joined and (
                residual.shape != x.shape or total.shape != x.shape
                or residual.dtype != x.dtype or total.dtype != x.dtype
                or any(np.may_share_memory(total, a) for a in arrays + (residual,)))):
            return False
        ffi = module.ffi
        ptrs = [ffi.from_buffer("real[]", a) for a in arrays + joined]
        if not joined:
            ptrs += [ffi.NULL, ffi.NULL]
        module.lib.layernorm_fprop(*ptrs, x.shape[0], x.shape[1], eps)
        return True

    def layernorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None):
        """dx (M, D) (plus ``residual`` (M, D) when given), and dgamma, dbeta (1, D)
        accumulated into."""
        arrays = (dy, xhat, invstd, gamma, dx, dgamma, dbeta)
        extra = () if residual is None else (residual,)
        module = self._usable("norm", *arrays, *extra)
        if module is None or (residual is not None and (
                residual.shape != dx.shape or residual.dtype != dx.dtype
                or any(np.may_share_memory(residual, a) for a in (dy, xhat)))):
            return False
        ffi = module.ffi
        ptrs = [ffi.from_buffer("real[]", a) for a in arrays]
        res = ffi.NULL if residual is None else ffi.from_buffer("real[]", residual)
        module.lib.layernorm_bprop(*ptrs[:4], res, *ptrs[4:],
                                   self._norm_work(module, dy.dtype, *dy.shape),
                                   dy.shape[0], dy.shape[1])
        return True

    def softmax(self, x, out, axis=-1):
        """out = softmax(x) over the last axis (other axes: False)."""
        if x.ndim == 0 or axis not in (-1, x.ndim - 1) or x.shape != out.shape:
            return False
        module = self._usable("softmax", x, out)
        if module is None:
            return False
        K = x.shape[-1]
        module.lib.softmax_rows(module.ffi.from_buffer("real[]", x),
                                module.ffi.from_buffer("real[]", out), x.size // max(K, 1), K)
        return True

    def softmax_cross_entropy(self, logits, targets, probs, grad, scale):
        """Fused softmax + cross-entropy of (M, K) arrays, targets (M, K) one-hot or soft, or
        (M,) int32 class indices; returns the summed loss or None.  A class index outside
        [0, K) raises numpy_norm's IndexError, which names it."""
        if targets.dtype.kind in "iu":
            module = self._usable("softmax", logits, probs, grad)
            if module is None or targets.dtype != np.int32 or not targets.flags.c_contiguous:
                return None
            ffi = module.ffi
            bad = self._bad_index
            K = logits.shape[-1]
            loss = float(module.lib.softmax_cross_entropy_index(
                *(ffi.from_buffer("real[]", a) if a is not targets
                  else ffi.from_buffer("int32_t[]", a) for a in (logits, targets, probs, grad)),
                logits.size // max(K, 1), K, scale, ffi.from_buffer("int64_t[]", bad)))
            if bad[0] >= 0:
                from .numpy_norm import check_class_indices
                check_class_indices(targets, K)
            return loss
        module = self._usable("softmax", logits, targets, probs, grad)
        if module is None:
            return None
        ptrs = [module.ffi.from_buffer("real[]", a) for a in (logits, targets, probs, grad)]
        K = logits.shape[-1]
        return float(module.lib.softmax_cross_entropy(*ptrs, logits.size // max(K, 1), K,
                                                      scale))

    # ---- GELU and attention softmax ----------------------------------------------------------
    def gelu(self, x, out, bias, pre, approximate):
        """pre = x + bias (bias (D,) or None; pre may be x), out = gelu(pre) over rows (M, D)."""
        arrays = (x, out) + tuple(a for a in (bias, pre) if a is not None)
        if x.ndim == 0 or x.shape != out.shape or (bias is not None and (
                pre is None or pre.shape != x.shape or bias.size != x.shape[-1])):
            return False
        module = self._usable("gelu", *arrays)
        if module is None:
            return False
        ffi = module.ffi
        pre = x if pre is None else pre
        D = x.shape[-1]
        module.lib.gelu_fprop(ffi.from_buffer("real[]", x),
                              ffi.NULL if bias is None else ffi.from_buffer("real[]", bias),
                              ffi.from_buffer("real[]", pre), ffi.from_buffer("real[]", out),
                              x.size // max(D, 1), D, approximate == "tanh")
        return True

    def gelu_bprop(self, x, dy, dx, dbias, approximate, y=None):
        """dx = dy * gelu'(x) over rows (M, D); dbias (D,) += its column sums unless None;
        y = gelu(x) or None (see ``gelu_bprop`` in gelu.h).  The sums' work array is kept in
        ``workspaces`` (:meth:`block_sums_work`), so repeated calls allocate nothing."""
        arrays = (x, dy, dx) + tuple(a for a in (dbias, y) if a is not None)
        if x.ndim == 0 or not x.shape == dy.shape == dx.shape or (
                dbias is not None and dbias.size != x.shape[-1]) or (
                y is not None and y.shape != x.shape):
            return False
        module = self._usable("gelu", *arrays)
        if module is None:
            return False
        ffi = module.ffi
        D = x.shape[-1]
        M = x.size // max(D, 1)
        work = ffi.NULL if dbias is None else ffi.from_buffer(
            "double[]", self.block_sums_work(module, "gelu_bprop", x.dtype, M, D))
        module.lib.gelu_bprop(ffi.from_buffer("real[]", x),
                              ffi.NULL if y is None else ffi.from_buffer("real[]", y),
                              ffi.from_buffer("real[]", dy),
                              ffi.from_buffer("real[]", dx),
                              ffi.NULL if dbias is None else ffi.from_buffer("real[]", dbias),
                              work, M, D, approximate == "tanh")
        return True

    def masked_softmax(self, x, out, scale, causal, key_mask):
        """Masked softmax of scores (B, Tq, Tk); key_mask (N, Tk) or None (any dtype)."""
        if x.ndim != 3 or x.shape != out.shape:
            return False
        module = self._usable("attention_softmax", x, out)
        if module is None:
            return False
        ffi = module.ffi
        B, Tq, Tk = x.shape
        mask, N = ffi.NULL, 1
        if key_mask is not None:
            keep = np.ascontiguousarray(key_mask, dtype=x.dtype)
            if keep.ndim != 2 or keep.shape[1] != Tk or B % max(keep.shape[0], 1):
                return False
            mask, N = ffi.from_buffer("real[]", keep), keep.shape[0]
        module.lib.attention_softmax_fprop(ffi.from_buffer("real[]", x),
                                           ffi.from_buffer("real[]", out), B, Tq, Tk, scale,
                                           bool(causal), mask, N)
        return True

    # ---- rows of a table (embeddings) --------------------------------------------------------
    def take_rows(self, table, idx, out):
        """out (..., D) = table (V, D)[idx] for checked int64 row numbers idx (n,)."""
        module = self._usable("rows", table, out)
        if module is None or idx.dtype != np.int64 or out.size != idx.size * table.shape[1]:
            return False
        ffi = module.ffi
        module.lib.take_rows(ffi.from_buffer("real[]", table), ffi.from_buffer("int64_t[]", idx),
                             ffi.from_buffer("real[]", out), idx.size, table.shape[1])
        return True

    def scatter_add_rows(self, grad_table, idx, rows):
        """grad_table (V, D)[idx[i]] += rows (..., D)[i] in order, for checked int64 idx (n,)."""
        module = self._usable("rows", grad_table, rows)
        if module is None or idx.dtype != np.int64 or rows.size != idx.size * grad_table.shape[1]:
            return False
        ffi = module.ffi
        module.lib.scatter_add_rows(ffi.from_buffer("real[]", grad_table),
                                    ffi.from_buffer("int64_t[]", idx),
                                    ffi.from_buffer("real[]", rows), idx.size,
                                    grad_table.shape[1])
        return True

    def permute_axes(self, x, out, axes):
        """out = numpy.transpose(x, axes) for 4-D arrays whose last axis stays last and is
        contiguous in both (either may be a strided view): the row copies of ``copy_rows``."""
        axes = tuple(int(a) for a in axes)
        if (x.ndim != 4 or out.ndim != 4 or axes[3:] != (3,) or x.dtype != out.dtype
                or x.dtype not in _FLOATS or x.strides[3] != x.itemsize
                or out.strides[3] != out.itemsize or not out.flags.writeable
                or any(x.shape[a] != out.shape[i] for i, a in enumerate(axes))
                or any(s < 0 or s % x.itemsize for s in x.strides + out.strides)
                or np.may_share_memory(x, out)):
            return False
        module = self.module("rows", x.dtype)
        if module is None:
            return False
        ffi, it = module.ffi, x.itemsize
        src = [x.strides[a] // it for a in axes[:3]]
        dst = [s // it for s in out.strides[:3]]
        module.lib.copy_rows(ffi.cast("real *", _address(x)), *src,
                             ffi.cast("real *", _address(out)), *dst, *out.shape)
        return True

    def masked_softmax_bprop(self, y, dy, dx, scale):
        """dx = scale * y * (dy - rowsum(dy * y)) over the last axis."""
        if y.ndim == 0 or not y.shape == dy.shape == dx.shape:
            return False
        module = self._usable("attention_softmax", y, dy, dx)
        if module is None:
            return False
        ffi = module.ffi
        Tk = y.shape[-1]
        module.lib.attention_softmax_bprop(ffi.from_buffer("real[]", y),
                                           ffi.from_buffer("real[]", dy),
                                           ffi.from_buffer("real[]", dx), y.size // max(Tk, 1),
                                           Tk, scale)
        return True
