"""How many threads the CPU backend's libraries start: OpenMP (neonlite's C kernels and MKL,
which runs on the same GNU OpenMP runtime) and numpy's OpenBLAS (its per-thread count, for the calling thread).

Each reads its thread count once, when it loads; :func:`set_cpu_threads` changes it later,
for a process that learns its share of the cores after start-up (a rank of a data-parallel
job, :mod:`neonlite.distributed.cores`, through ``CPUBackend.set_threads``, which also resizes
the GEMMs the backend splits over its own threads, :mod:`.blas`).
"""
import ctypes
import functools
import os


def usable_cores():
    """How many cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def libgomp():
    """GNU OpenMP's runtime (ctypes), loaded on first call; None where it is absent."""
    try:
        return ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None


def openmp_threads():
    """The threads an OpenMP region started from the calling thread would use
    (``omp_get_max_threads()``, which sizes the C kernels' per-thread work arrays); 1 without
    GNU OpenMP."""
    gomp = libgomp()
    return 1 if gomp is None else int(gomp.omp_get_max_threads())


@functools.lru_cache(maxsize=None)
def openblas():
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


def set_cpu_threads(n):
    """Make OpenMP parallel regions and OpenBLAS GEMMs started from the calling thread use
    ``n`` threads (n >= 1).  Returns the libraries set (names)."""
    if int(n) < 1:
        raise ValueError(f"a thread count must be at least 1, got {n!r}")
    done = []
    gomp = libgomp()
    if gomp is not None:
        gomp.omp_set_num_threads(ctypes.c_int(int(n)))
        done.append("openmp")
    lib = openblas()
    if lib is not None:
        lib.openblas_set_num_threads_local(int(n))
        done.append("openblas")
    return done
