"""GEMMs for the CPU backend: numpy's BLAS, with the thread count chosen per call.

A multithreaded BLAS synchronizes its threads many times inside one GEMM; for a small or thin
product (a 5x5 filter on one channel: 25 x 100352 @ 100352 x 32) those waits cost more than the
second thread gains, and on a busy machine, where a waiting thread may be descheduled, they
turn milliseconds into seconds.  :func:`matmul` therefore runs GEMMs of fewer than
``SINGLE_THREAD_MACS`` multiply-adds on one BLAS thread (OpenBLAS's per-calling-thread setting,
``openblas_set_num_threads_local``) and bigger ones on all of them.  Where numpy's BLAS is not
an OpenBLAS with that call (MKL, Accelerate, an older OpenBLAS) every GEMM runs as numpy
chooses.
"""
import contextlib
import functools

import numpy as np

SINGLE_THREAD_MACS = 150_000_000


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
def one_thread():
    """Run the BLAS calls of this block (on this Python thread) on one BLAS thread."""
    lib = _openblas()
    if lib is None:
        yield
        return
    previous = lib.openblas_set_num_threads_local(1)
    try:
        yield
    finally:
        lib.openblas_set_num_threads_local(previous)


def matmul(a, b, out):
    """out = a @ b (numpy matmul semantics, stacks included) on one BLAS thread when the
    product is below ``SINGLE_THREAD_MACS`` multiply-adds."""
    macs = out.size * a.shape[-1]
    if macs >= SINGLE_THREAD_MACS:
        return np.matmul(a, b, out=out)
    with one_thread():
        return np.matmul(a, b, out=out)
