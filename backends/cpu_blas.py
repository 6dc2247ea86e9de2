"""GEMMs for the CPU backend: numpy's BLAS, with the number of BLAS threads tuned per shape.

A multithreaded BLAS synchronizes its threads many times inside one GEMM.  For a thin product
(a 5x5 filter on one channel: 25 x 100352 @ 100352 x 32) or a small one those waits cost more
than the second thread gains, and on a busy machine, where a waiting thread may be
descheduled, they can turn milliseconds into seconds; a big GEMM on an idle machine, on the
other hand, runs nearly twice as fast on two threads.  So :class:`GemmThreads` measures, the
first few times it meets a GEMM shape, that shape on one BLAS thread and on all of them
(alternating), and from then on uses the faster (as ``cudnn.benchmark`` does for convolution
algorithms).  GEMMs below ``TINY_MACS`` multiply-adds always run on one thread.

The thread count is set with OpenBLAS's per-calling-thread ``openblas_set_num_threads_local``;
where numpy's BLAS is not an OpenBLAS with that call (MKL, Accelerate, an older OpenBLAS), every
GEMM runs as numpy chooses.
"""
import contextlib
import functools
import time

import numpy as np

TINY_MACS = 1_000_000
TRIALS = 3


@functools.lru_cache(maxsize=None)
def _openblas():
    """numpy's OpenBLAS (a cffi library with ``openblas_set_num_threads_local``), or None."""
    try:
        import cffi
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line.lower() and ".so" in line})
    except (ImportError, OSError):
        return None
    ffi = cffi.FFI()
    ffi.cdef("int openblas_set_num_threads_local(int);")
    for path in paths:
        try:
            lib = ffi.dlopen(path)
            lib.openblas_set_num_threads_local  # noqa: B018 (the symbol must exist)
        except (OSError, AttributeError):
            continue
        return lib
    return None


@contextlib.contextmanager
def blas_threads(n):
    """Run the BLAS calls of this block (on this Python thread) on ``n`` BLAS threads
    (``None``: leave BLAS's own setting)."""
    lib = _openblas() if n is not None else None
    if lib is None:
        yield
        return
    previous = lib.openblas_set_num_threads_local(n)
    try:
        yield
    finally:
        lib.openblas_set_num_threads_local(previous)


class GemmThreads:
    """``matmul(a, b, out)``: out = a @ b (numpy matmul semantics) on the BLAS thread count
    measured fastest for this shape (see the module docstring).

    ``choices`` maps a shape key to the chosen count (1, or None for all threads).
    """

    def __init__(self):
        self.choices = {}
        self._trials = {}

    def matmul(self, a, b, out):
        if out.size * a.shape[-1] < TINY_MACS:
            with blas_threads(1):
                return np.matmul(a, b, out=out)
        key = (a.shape, a.strides, b.shape, b.strides, out.dtype.char)
        if key in self.choices:
            with blas_threads(self.choices[key]):
                return np.matmul(a, b, out=out)
        trials = self._trials.setdefault(key, {1: [], None: []})
        threads = 1 if len(trials[1]) <= len(trials[None]) else None
        start = time.perf_counter()
        with blas_threads(threads):
            np.matmul(a, b, out=out)
        trials[threads].append(time.perf_counter() - start)
        if min(len(t) for t in trials.values()) >= TRIALS:
            self.choices[key] = min(trials, key=lambda n: float(np.median(trials[n])))
            del self._trials[key]
        return out
