"""What this machine can run, and what to do about what it cannot: the checks behind
``neonlite doctor`` (the command itself is ``neonlite/cli/doctor.py``).

:func:`collect` makes the rows of one table (:mod:`.report`): Python and numpy, the BLAS, the C
compiler with a test kernel and OpenMP, the CPU and its instruction sets, bfloat16 (each op
class's path, the bf16 and float32 peaks), the JPEG decoder of image data sets, the kernel
cache, nvcc, pycuda, the CUDA driver and
devices, MPI; and the reason the asked-for backend cannot run here (None when it can).
:func:`verdict` is the closing line for one that can. The GPU self-test, which compares every
CUDA kernel family with the CPU backend on the device, is :mod:`.selftest`.
"""
import os

from .report import FAIL


def collect(backend="cpu", probe_timeout=None):
    """(rows, reason ``backend`` cannot run here or None)."""
    from . import bf16_row, cache_row, cpu_rows, gpu_rows, jpeg_row
    cache = cache_row.cache_row()  # before the bf16 row, which may build and measure into it
    rows = [*cpu_rows.python_rows(), cpu_rows.blas_row(), *cpu_rows.compiler_rows(),
            cpu_rows.cpu_row(), bf16_row.bf16_row(), jpeg_row.jpeg_row(), cache]
    timeout = gpu_rows.PROBE_TIMEOUT_S if probe_timeout is None else probe_timeout
    found, gpu_reason = gpu_rows.gpu_rows(backend == "gpu", timeout)
    rows += [*found, cpu_rows.mpi_row()]
    reason = gpu_reason if backend == "gpu" else _cpu_reason()
    if reason is None and backend == "gpu" and _row(rows, "kernel cache").status == FAIL:
        reason = f"the GPU kernels cannot be cached: {_row(rows, 'kernel cache').found}"
    return rows, reason


def _row(rows, name):
    return next(r for r in rows if r.name == name)


def _cpu_reason():
    from .. import backends
    previous = backends._current
    try:
        backends.gen_backend("cpu", batch_size=1)
    except Exception as err:  # whatever stops the cpu backend is the answer
        return " ".join(str(err).split()) or type(err).__name__
    finally:
        backends._current = previous
    return None


def verdict(rows, backend, reason):
    """The closing line for a backend that can run (``reason`` None)."""
    if backend != "cpu":
        return f"the {backend} backend can run here"
    broken = [r for r in rows if r.name in ("C compiler", "test kernel", "kernel cache")
              and r.status == FAIL]
    if os.environ.get("NEONLITE_CPU_KERNELS", "").strip() == "0":
        return ("the cpu backend can run here, but without its compiled kernels (numpy only, "
                "slower): NEONLITE_CPU_KERNELS=0 is set")
    if broken:
        return (f"the cpu backend can run here, but without its compiled kernels (numpy only, "
                f"slower): {broken[0].name}: {broken[0].found}")
    return "the cpu backend can run here, with its compiled kernels"
