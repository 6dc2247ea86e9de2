"""The ``neonlite`` command: ``train``, ``eval``, ``describe``, ``plot``, plus ``kernels`` and
``generate`` from their own modules.  ``main(argv)`` returns the exit status: 0 on success, 1
for a user error (one line on stderr; the traceback too with ``-v``), 2 for bad flags."""
import argparse
import sys

from .. import __version__
from . import describe, evaluate, export_hf, extras, import_hf, plot, profile, train
from .errors import run_guarded


def build_parser(wanted=None):
    parser = argparse.ArgumentParser(
        prog="neonlite", description="Define networks in YAML and train, evaluate, describe "
        "and plot them.  'neonlite COMMAND -h' shows a command's flags.")
    parser.add_argument("--version", action="version", version=f"neonlite {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (train, evaluate, describe, plot, profile, import_hf, export_hf):
        module.register(subparsers)
    extras.add(subparsers, wanted)
    return parser


def _command_word(argv):
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_word(argv))
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return run_guarded(lambda: args.func(args), getattr(args, "verbose", False),
                       quiet=getattr(args, "quiet", False))


__all__ = ["main", "build_parser"]
