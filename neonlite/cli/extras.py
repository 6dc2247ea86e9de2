"""Subcommands that live in other parts of neonlite, imported only when asked for:

* ``neonlite kernels ...``: ``neonlite.cli.kernels.register(subparsers)`` adds it;
* ``neonlite generate ...``: ``neonlite.generation.add_generate_arguments(parser)`` and
  ``generate_command(args)``;
* ``neonlite doctor ...``: ``neonlite.doctor.register(subparsers)`` adds it.

For any other command they are listed in ``--help`` by a stand-in parser and not imported; if
the module cannot be imported when its command is run, the command fails with one line
saying so.
"""
import argparse
import importlib

from .errors import CommandUnavailable

HELP = {"kernels": "build, list and clean the compiled kernels (CPU C, CUDA)",
        "generate": "sample text from a trained language model checkpoint",
        "doctor": "check what this machine can run, and say what to do about what it cannot"}


def add(subparsers, wanted):
    """Add the ``kernels`` and ``generate`` subcommands (``wanted``: the command being run)."""
    for name in HELP:
        if name != wanted:
            subparsers.add_parser(name, help=HELP[name], add_help=False)
            continue
        try:
            _REGISTER[name](subparsers)
        except ImportError as err:
            _unavailable(subparsers, name, err)


def _register_kernels(subparsers):
    importlib.import_module("neonlite.cli.kernels").register(subparsers)


def _register_generate(subparsers):
    generation = importlib.import_module("neonlite.generation")
    parser = subparsers.add_parser("generate", help=HELP["generate"],
                                   description=HELP["generate"])
    generation.add_generate_arguments(parser)
    parser.set_defaults(func=generation.generate_command)


def _register_doctor(subparsers):
    importlib.import_module("neonlite.doctor").register(subparsers)


_REGISTER = {"kernels": _register_kernels, "generate": _register_generate,
             "doctor": _register_doctor}


def _unavailable(subparsers, name, err):
    parser = subparsers.add_parser(name, help=HELP[name])
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.add_argument("-v", "--verbose", action="store_true")

    def fail(args):
        raise CommandUnavailable(f"neonlite {name} is not available in this install ({err})")
    parser.set_defaults(func=fail)
