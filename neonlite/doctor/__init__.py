"""``neonlite doctor``: what this machine can run, and what to do about what it cannot.

    neonlite doctor [-b cpu|gpu] [--gpu] [--selftest] [--probe-timeout S]

It prints one table (:mod:`.report`): Python and numpy, the BLAS, the C compiler with a test
kernel and OpenMP, the CPU and its instruction sets, the kernel cache, nvcc, pycuda, the CUDA
driver and devices, MPI; then one line saying whether the backend asked about (``-b``, default
cpu; ``--gpu`` is ``-b gpu``) can run here.  Exit status 0 when it can, 1 when it cannot (the
reason goes to stderr as ``neonlite: error: ...``).

``--selftest`` (GPU only) then compares every CUDA kernel family with the CPU backend on the
device (:mod:`.selftest`), one line per family, exit status 1 on any failure; where the GPU
backend cannot run it stops at once with the reason.
"""
import os
import sys

from ..cli.errors import CommandUnavailable
from .report import FAIL, format_table

HELP = "check what this machine can run (backends, compilers, BLAS, cache, GPU, MPI)"


def register(subparsers):
    """Add the ``doctor`` subcommand to ``subparsers``."""
    from ..backends import available_backends
    from .gpu_rows import PROBE_TIMEOUT_S
    parser = subparsers.add_parser("doctor", help=HELP, description=__doc__.split("\n\n")[0])
    parser.add_argument("-b", "--backend", choices=available_backends(), default="cpu",
                        help="the backend to check (exit status 1 when it cannot run here; "
                             "default cpu)")
    parser.add_argument("--gpu", action="store_const", const="gpu", dest="backend",
                        help="the same as -b gpu")
    parser.add_argument("--selftest", action="store_true",
                        help="with --gpu: compare every CUDA kernel family with the CPU backend "
                             "on the device")
    parser.add_argument("--probe-timeout", type=float, default=PROBE_TIMEOUT_S, metavar="S",
                        help="seconds the pycuda/driver probe may take (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show a traceback with errors")
    parser.set_defaults(func=run)
    return parser


def collect(backend="cpu", probe_timeout=None):
    """(rows, reason ``backend`` cannot run here or None)."""
    from . import cache_row, cpu_rows, gpu_rows
    rows = [*cpu_rows.python_rows(), cpu_rows.blas_row(), *cpu_rows.compiler_rows(),
            cpu_rows.cpu_row(), cache_row.cache_row()]
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


def run(args, out=None):
    """Run the parsed ``doctor`` command; returns the exit status."""
    from .. import __version__
    out = out or sys.stdout
    if args.selftest:
        if args.backend != "gpu":
            raise CommandUnavailable("--selftest checks the GPU backend: use "
                                     "neonlite doctor --gpu --selftest")
        from .selftest import run_on_device
        return run_on_device(out, args.probe_timeout)
    rows, reason = collect(args.backend, args.probe_timeout)
    print(f"neonlite {__version__} doctor (checking the {args.backend} backend)", file=out)
    print(format_table(rows), file=out)
    if reason is not None:
        out.flush()
        print(f"neonlite: error: the {args.backend} backend cannot run here: {reason}",
              file=sys.stderr)
        return 1
    print(verdict(rows, args.backend, reason), file=out)
    return 0
