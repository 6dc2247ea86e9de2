"""The ``neonlite`` command.  Every subcommand is one module of this package with a
``register(subparsers)``: ``train``, ``eval`` (``evaluate``), ``describe``, ``plot``,
``profile``, ``import`` (``import_hf``), ``export`` (``export_hf``), ``generate``, ``kernels``,
``doctor``, ``predict``.  ``main(argv)`` returns the exit status: 0 on success, 1 for a user error (one line
on stderr; the traceback too with ``-v``), 2 for bad flags."""
import sys

from .. import __version__
from . import (describe, doctor, evaluate, export_hf, generate, import_hf, kernels, plot,
               predict, profile, train)
from .arguments import OneLineParser
from .errors import run_guarded


SUBCOMMANDS = (train, evaluate, predict, describe, plot, profile, import_hf, export_hf, kernels,
               generate, doctor)


def build_parser():
    parser = OneLineParser(
        prog="neonlite", description="Define networks in YAML and train, evaluate, describe "
        "and plot them.  'neonlite COMMAND -h' shows a command's flags.")
    parser.add_argument("--version", action="version", version=f"neonlite {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return run_guarded(lambda: args.func(args), getattr(args, "verbose", False),
                       quiet=getattr(args, "quiet", False))


__all__ = ["main", "build_parser"]
