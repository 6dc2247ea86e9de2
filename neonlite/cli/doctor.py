"""``neonlite doctor``: what this machine can run, and what to do about what it cannot.

    neonlite doctor [-b cpu|gpu] [--gpu] [--selftest] [--probe-timeout S]

It prints one table (:mod:`neonlite.doctor.report`): Python and numpy, the BLAS, the C compiler
with a test kernel and OpenMP, the CPU and its instruction sets, the kernel cache, nvcc, pycuda,
the CUDA driver and devices, MPI; then one line saying whether the backend asked about (``-b``,
default cpu; ``--gpu`` is ``-b gpu``) can run here.  Exit status 0 when it can, 1 when it cannot
(the reason goes to stderr as ``neonlite: error: ...``).

``--selftest`` (GPU only) then compares every CUDA kernel family with the CPU backend on the
device (:mod:`neonlite.doctor.selftest`), one line per family, exit status 1 on any failure;
where the GPU backend cannot run it stops at once with the reason.
"""
import sys

from ..backends import available_backends
from ..doctor import collect, verdict
from ..doctor.gpu_rows import PROBE_TIMEOUT_S
from ..doctor.report import format_table
from ..doctor.selftest import run_on_device
from ..version import __version__
from .errors import CommandUnavailable

HELP = "check what this machine can run (backends, compilers, BLAS, cache, GPU, MPI)"


def register(subparsers):
    """Add the ``doctor`` subcommand to ``subparsers``."""
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


def run(args, out=None):
    """Run the parsed ``doctor`` command; returns the exit status."""
    out = out or sys.stdout
    if args.selftest:
        if args.backend != "gpu":
            raise CommandUnavailable("--selftest checks the GPU backend: use "
                                     "neonlite doctor --gpu --selftest")
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
