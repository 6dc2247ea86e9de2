"""Building and loading the CPU backend's C kernels (``kernels/cpu/*.c``, C with OpenMP,
called through cffi): :class:`KernelModules` holds the cffi module of each source and data
type, and the work arrays the kernels share.

The kernels of a source are built (or loaded from the kernel cache) the first time one of them
is needed.  Where they cannot be built (no C compiler, or ``NEONLITE_CPU_KERNELS=0``) the
backend runs on numpy alone and says so once per process, in one line, on the ``neonlite``
logger.
"""
import contextlib
import logging
import os

import numpy as np

from .blas import GemmThreads
from .mkl_blas import MKLGemm, load_mkl
from .kept_calls import BF16_CALL, KeptCalls
from .threads import libgomp, openmp_threads
from ...kernels.build import default_builder
from ...kernels.specs import CPU_SOURCES, cpu_variant, find
from ...kernels.toolchain import CompileError, CompilerNotFound
from ...kernels.first_use import compile_missing

#: the data types the C kernels are built for
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_logger = logging.getLogger("neonlite")
#: how many times slower numpy alone runs the quick start than the C kernels, as the warning
#: says (benchmarks/ measures it)
NUMPY_SLOWDOWN = 5


#: the kernel calls a backend keeps by their arrays' identities (:meth:`KernelModules.run_call`)
MAX_KEPT_CALLS = 4096

#: GOMP_SPINCOUNT with MKL: idle OpenMP threads spin about this many pause instructions
#: (around a millisecond on a recent x86 core: the gaps between a step's kernels and GEMMs)
#: before they sleep
SPIN_COUNT = 10000


@contextlib.contextmanager
def _openmp_wait_policy(gemm):
    """Load OpenMP (with the first kernel module, or :func:`load_openmp`) with a wait policy
    of neonlite's choosing unless the user chose one (``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` set).

    OpenMP reads the policy once, when its runtime loads.  Without MKL, numpy's BLAS threads
    run between the kernels and spinning OpenMP threads would take their cores:
    ``OMP_WAIT_POLICY=PASSIVE`` (sleep at once; a wake-up costs tens of microseconds per
    parallel loop).  With MKL (``gemm`` an :class:`MKLGemm`), GEMMs and kernels share one
    OpenMP runtime and a short spin (``GOMP_SPINCOUNT=SPIN_COUNT``) spares a wake-up on
    nearly every kernel and GEMM of a step of small tensors; OpenMP's own default spins about
    thirty times longer, which on a machine shared with other busy processes lets a spinning
    thread hold the core its partner needs for milliseconds at each wait.  The variable is
    set only while OpenMP loads, so other libraries' OpenMP runtimes keep their defaults.
    """
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        yield
        return
    name, value = ("GOMP_SPINCOUNT", str(SPIN_COUNT)) if isinstance(gemm, MKLGemm) else \
        ("OMP_WAIT_POLICY", "PASSIVE")
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def load_openmp(gemm):
    """Load the OpenMP runtime now (if it is not loaded yet) under :func:`_openmp_wait_policy`,
    so the first library that needs it, a kernel module or MKL's first GEMM, finds it set."""
    with _openmp_wait_policy(gemm):
        libgomp()


def address(a):
    """The address of ndarray ``a``'s first element."""
    return a.ctypes.data


def pointer(ffi, a):
    """A ``real *`` to ndarray ``a``'s first element (NULL for None) that, unlike
    ``ffi.from_buffer``, does not keep ``a`` alive: for calls kept by weak references."""
    return ffi.NULL if a is None else ffi.cast("real *", a.ctypes.data)


def _buffer(ffi, a):
    """A ``real[]`` buffer of ndarray ``a`` (NULL for None) that keeps ``a`` alive."""
    return ffi.NULL if a is None else ffi.from_buffer("real[]", a)


def contiguous(*arrays):
    """All of ``arrays`` C-contiguous and of one data type the kernels are built for."""
    dtype = arrays[0].dtype
    return dtype in FLOATS and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays)


class KernelModules:
    """Lazily built C kernels for one CPU backend (see the module docstring): the base of
    :class:`~neonlite.backends.cpu.build.KernelModules`, whose other bases (one per contract
    section, in ``conv.py``, ``pool.py``, ``norm.py``, ...) call the kernels.

    ``builder`` is a :class:`~neonlite.kernels.build.Builder` (default: the process's);
    ``gemm`` runs the GEMMs: MKL's CBLAS when the ``mkl`` wheel is installed
    (:class:`~neonlite.backends.cpu.mkl_blas.MKLGemm`), else numpy's BLAS with per-shape thread
    tuning (:class:`~neonlite.backends.cpu.blas.GemmThreads`).
    """

    def __init__(self, builder=None, gemm=None):
        self._builder = builder
        self._modules = {}
        self._prepared = set()
        self.workspaces = {}
        self._kept_calls = KeptCalls(MAX_KEPT_CALLS)
        if gemm is None:
            gemm = MKLGemm() if load_mkl() is not None else GemmThreads()
        self.gemm = gemm
        load_openmp(gemm)

    @property
    def builder(self):
        if self._builder is None:
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
        if found is not None or dtype not in FLOATS:
            return found
        if self.unavailable_reason() is not None:
            self._say_unavailable()
            return None
        self.prepare(dtype)
        if self.unavailable_reason() is not None:
            return None
        try:
            with _openmp_wait_policy(self.gemm):
                found = self.builder.load_cpu(cpu_variant(stem, dtype))
        except CompilerNotFound as err:
            self._mark_unavailable(str(err))
            return None
        except (CompileError, ImportError, OSError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            self._mark_unavailable(f"{first} (`neonlite kernels build` shows the compiler "
                                   f"log)")
            return None
        self._modules[(stem, dtype)] = found
        return found

    def variant(self, name):
        """The cffi module of kernel variant ``name`` built once for every element type (the
        bf16 kernels of ``kernels/specs.py``'s ``BF16_VARIANTS``), or None where the kernels
        cannot be built here; loaded on first use and kept."""
        found = self._modules.get(("variant", name))
        if found is not None or self.unavailable_reason() is not None:
            return found
        try:
            with _openmp_wait_policy(self.gemm):
                found = self.builder.load_cpu(find(name))
        except (CompilerNotFound, CompileError, ImportError, OSError):
            return None
        self._modules[("variant", name)] = found
        return found

    def prepare(self, dtype):
        """Build, at once and after one notice on stderr, every C kernel for ``dtype`` that the
        cache does not hold yet (:func:`~neonlite.kernels.first_use.compile_missing`), so the
        first training steps do not stop to compile one source after another."""
        dtype = np.dtype(dtype)
        if dtype not in FLOATS or dtype in self._prepared or self.unavailable_reason():
            return
        self._prepared.add(dtype)
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

    def run_call(self, name, arrays, scalars, keep, prepare):
        """Run a kernel call: ``prepare()`` gives it as (C function, arguments) on ``arrays``,
        or None when the kernels do not take the case (then nothing runs and the result is
        False).  With ``keep`` (every array is a tensor's lasting storage, not a per-call
        view), the call is kept (``_kept_calls``, at most ``MAX_KEPT_CALLS``) under ``name``,
        the ``scalars`` and the arrays' identities, with weak references to the arrays, so the
        next call on the same (living) arrays skips its checks and pointer making.  ``scalars``
        must be every argument besides the arrays; the call must point at the arrays
        (:func:`pointer`) without holding them (a work array of the backend's may be held by
        its cffi buffer)."""
        if keep and self.run_kept(name, arrays, scalars):
            return True
        call = prepare()
        if call is None:
            return False
        if keep:
            self._kept_calls.keep((name, scalars) + tuple(map(id, arrays)), arrays, call)
        call[0](*call[1])
        return True

    def run_kept(self, name, arrays, scalars):
        """Run the call :meth:`run_call` kept under ``name`` and ``scalars`` for these same
        living ``arrays``: True, or False (nothing run) where none is kept."""
        found = self._kept_calls.find((name, scalars) + tuple(map(id, arrays)), arrays)
        if found is None:
            return False
        found[0](*found[1])
        return True

    def usable(self, stem, *arrays):
        """The cffi module of C source ``stem`` for ``arrays`` (numpy, all C-contiguous and of
        one float32 or float64 type), or None when the kernels do not take them (then numpy
        runs): the one way every CPU op reaches its kernels."""
        if not contiguous(*arrays):
            return None
        return self.module(stem, arrays[0].dtype)

    def run_op(self, op, arrays, scalars, keep=False):
        """Call the C function of dispatched op-table row ``op`` on numpy ``arrays`` (None for
        an absent optional operand) and ``scalars``, in the row's order, with its arguments
        as the row says (``Op.c_arguments``: the sizes (M, D), the work array of
        ``kernel.work``; see ``backends/ops/table.py``), after the row's check
        (``op.check_operands``, which raises); False when the kernels do not take the arrays
        (:meth:`usable`, ``kernel.takes``).  ``keep``: see :meth:`run_call` (a kept call
        skips the check, passed on the same arrays).  A call not kept passes cffi buffers, a
        quarter of the cost of :func:`pointer` s (the calls on a recurrent layer's time-step
        slices)."""
        if keep:
            return self.run_call(op.name, arrays, scalars, True,
                                 lambda: self._op_call(op, arrays, scalars, pointer))
        call = self._op_call(op, arrays, scalars, _buffer)
        if call is None:
            return False
        call[0](*call[1])
        return True

    def run_bf16_op(self, op, arrays, scalars, keep=False):
        """Call the ``bf16_symbol`` of dispatched row ``op``'s kernel for ``scalars`` (the row's
        kernel, or its choice by ``kernel.choose_by``: the float32 variant's C function taking
        every operand as bfloat16 bits) on C-contiguous bf16 ``arrays`` (None for an absent
        optional operand), whose tensors passed the row's check; False where there is none or
        the kernels do not take the case.  ``keep``: see :meth:`run_call`."""
        call = op.c_call(scalars)
        if call is None or call[0].bf16_symbol is None:
            return False
        return self.run_call(op.name + BF16_CALL, arrays, scalars, keep,
                             lambda: self._bf16_call(call, op, arrays, scalars))

    def _bf16_call(self, call, op, arrays, scalars):
        """(C function, arguments) of :meth:`run_bf16_op`'s call (``call``: the kernel and the
        argument order ``Op.c_call`` gives), or None where the arrays are not C-contiguous bf16
        bits (a kept call was made on the same arrays, which stay so)."""
        kernel, order = call
        module = self.module(kernel.c_source, FLOATS[0])
        if module is None or not all(a is None or a.flags.c_contiguous and a.dtype == np.uint16
                                     for a in arrays) or (
                    kernel.takes is not None and not kernel.takes(*arrays, *scalars)):
            return None
        ffi = module.ffi
        sizes = op.sizes(arrays)
        work = None if kernel.work is None else ffi.from_buffer(
            "double[]", self.block_sums_work(module, kernel.work, FLOATS[0], *sizes))
        bits = [ffi.NULL if a is None else ffi.cast("uint16_t *", a.ctypes.data)
                for a in arrays]
        return getattr(module.lib, kernel.bf16_symbol), order(
            (*bits, *sizes, *op.numbers(scalars), work))

    def run_plan_op(self, op, arguments, scalars, prepare, keep=False):
        """Run dispatched row ``op`` whose kernel's arguments are its plan's
        (``kernel.arguments == "plan"``): the row's check, then the C call ``prepare(module,
        real, *arguments, *scalars)`` gives as (C function, arguments) (the family's section
        file makes it from the plan: its tables and work arrays); False when the kernels do
        not take the arrays among ``arguments`` (the others, the plan, are taken as they
        are).  ``real(a)`` is an array's C pointer: a cffi buffer, or, with ``keep`` (every
        array a tensor's lasting storage), a :func:`pointer` that does not hold it, and the
        call is kept as :meth:`run_call` keeps one, also under the plan's identity and the
        OpenMP thread count (which sizes the work arrays the call holds)."""
        if not keep:
            call = self._plan_call(op, arguments, scalars, prepare, False)
            if call is None:
                return False
            call[0](*call[1])
            return True
        return self.run_call(op.name, arguments, tuple(scalars) + (openmp_threads(),), True,
                             lambda: self._plan_call(op, arguments, scalars, prepare, True))

    def _plan_call(self, op, arguments, scalars, prepare, keep):
        """(C function, arguments) of :meth:`run_plan_op`'s call, or None."""
        op.check_operands(arguments, scalars)
        module = self.usable(op.kernel.c_source, *[a for o, a in zip(op.operands, arguments)
                                                   if o.plan is None])
        if module is None:
            return None
        ffi = module.ffi
        real = (lambda a: pointer(ffi, a)) if keep else (lambda a: ffi.from_buffer("real[]", a))
        return prepare(module, real, *arguments, *op.numbers(scalars))

    def _op_call(self, op, arrays, scalars, point):
        """(C function, arguments) of row ``op`` on ``arrays`` after its check, the operands
        given by ``point(ffi, array)``; None where the kernels do not take the case."""
        op.check_operands(arrays, scalars)
        call = op.c_call(scalars)
        if call is None:
            return None
        kernel, order = call
        module = self.usable(kernel.c_source, *[a for a in arrays if a is not None])
        if module is None or (kernel.takes is not None and not kernel.takes(*arrays, *scalars)):
            return None
        ffi = module.ffi
        sizes = op.sizes(arrays)
        work = None if kernel.work is None else ffi.from_buffer(
            "double[]", self.block_sums_work(module, kernel.work, arrays[0].dtype, *sizes))
        return getattr(module.lib, kernel.c_symbol), order(
            (*[point(ffi, a) for a in arrays], *sizes, *op.numbers(scalars), work))

    def block_sums_work(self, module, function, dtype, rows, cols):
        """The float64 work array (1-D) that C function ``function`` of ``module`` (the kernels
        for ``dtype``) takes for its sums of ``cols`` columns over ``rows`` rows in row blocks
        (``nl_block_sums_size`` in ``kernels/cpu/common.h``, plus what the function needs
        besides): as long as ``<function>_work_size(rows, cols)`` says.

        Kept in ``workspaces``, so a training loop allocates it once: the key is (function,
        dtype, cols), and the length depends on ``rows`` only through the number of row
        blocks (``nl_blocks(rows)``, at most 32); the longest asked for is kept, and a call
        of fewer rows (a batch of shorter sequences) takes it too.  The kernels only use it
        during a call, as far as their sizes say, and need no particular contents."""
        size = int(getattr(module.lib, f"{function}_work_size")(rows, cols))
        key = (function, np.dtype(dtype), int(cols))
        work = self.workspaces.get(key)
        if work is None or work.size < size:
            work = self.workspaces[key] = np.empty(size, dtype=np.float64)
        return work
