"""``neonlite doctor --gpu --selftest``: every CUDA kernel family against the CPU backend.

:func:`run_families` runs the checks of :mod:`.selftest_families` with any GPU backend factory
and prints one line per family (pass or FAIL, the largest error against its tolerance), then a
summary line to paste into a bug report; it returns the exit status (1 on any failure).  A
family that raises fails with the error's first line.  :func:`run_on_device` probes for the GPU
first (in a child process, under a time limit) and stops at once, with the reason, where the GPU
backend cannot run; otherwise it runs the families on ``gen_backend("gpu")``.
"""
import platform
import sys
import time

import numpy as np

from .report import one_line
from .selftest_families import FAMILIES


def largest_error(comparisons):
    """(error, what) of the worst comparison: max |got - want| / max(1, max |want|)."""
    worst = (0.0, "")
    for what, got, want in comparisons:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            return float("inf"), f"{what}: shape {got.shape}, expected {want.shape}"
        if got.size == 0:
            continue
        if not np.isfinite(got).all():
            return float("inf"), f"{what}: not finite"
        scale = max(1.0, float(np.abs(want).max()))
        error = float(np.abs(got - want).max()) / scale
        if error > worst[0] or not worst[1]:
            worst = (error, what)
    return worst


def run_families(make_gpu, make_cpu, out=None, families=FAMILIES, device="?"):
    """Run ``families`` (``(name, check, tolerance)``); print a line each and the summary;
    return 0 when every family passes, else 1."""
    from .. import __version__, backends
    out = out or sys.stdout
    failed = 0
    start = time.perf_counter()
    for name, check, tolerance in families:
        previous = backends._current
        began = time.perf_counter()
        try:
            error, what = largest_error(check(make_gpu, make_cpu))
            passed = error <= tolerance
            detail = f"max error {error:.1e} (tolerance {tolerance:.0e}; worst: {what})"
        except Exception as err:  # a family that crashes is a failed family, and the rest run
            passed, detail = False, f"error: {type(err).__name__}: {one_line(err)[:300]}"
        finally:
            backends._current = previous
        failed += not passed
        print(f"{'pass' if passed else 'FAIL'}  {name:<29} {detail} "
              f"[{time.perf_counter() - began:.1f} s]", file=out, flush=True)
    print(f"selftest: {len(families) - failed} of {len(families)} kernel families pass on "
          f"{device} (neonlite {__version__}, numpy {np.__version__}, python "
          f"{platform.python_version()}) in {time.perf_counter() - start:.0f} s", file=out)
    return 1 if failed else 0


def run_on_device(out=None, probe_timeout=None):
    """The selftest on this machine's GPU 0; exit status (1 at once when it cannot run)."""
    from .. import gen_backend
    from .gpu_rows import PROBE_TIMEOUT_S, probe_rows, run_probe
    out = out or sys.stdout
    found = run_probe(PROBE_TIMEOUT_S if probe_timeout is None else probe_timeout)
    _, reason = probe_rows(found, needed=True)
    if reason is not None:
        print(f"neonlite: error: the GPU selftest cannot run here: {reason}", file=sys.stderr)
        return 1
    first = found["devices"][0]
    device = f"{first['name']} ({first['arch']}, CUDA driver {found['driver']})"
    print(f"selftest on {device}: {len(FAMILIES)} kernel families against the CPU backend "
          f"(the first run compiles the kernels with nvcc)", file=out, flush=True)

    def make_gpu(dtype):
        return gen_backend("gpu", batch_size=4, rng_seed=0, datatype=dtype)

    def make_cpu():
        return gen_backend("cpu", batch_size=4, rng_seed=0)
    return run_families(make_gpu, make_cpu, out, device=device)
