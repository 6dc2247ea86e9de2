"""The shared entry point of the Python twins in ``examples/``: ``python examples/<name>.py
-b gpu -e 2`` takes the same flags as ``neonlite train`` and runs the same code path."""
import argparse
import sys

from ..config.run import RunConfig
from .arguments import add_run_arguments, overrides
from .errors import run_guarded
from .session import train


def example_config(network, settings, source):
    """The :class:`RunConfig` of a Python-built network: ``network()`` returns (layers,
    cost, optimizer); ``settings`` the other top-level keys (dataset, epochs, batchsize, ...).
    The objects go through their descriptions, exactly as a YAML file would."""
    layers, cost, optimizer = network()
    data = dict(settings)
    data["layers"] = [layer.get_description() for layer in layers]
    data["cost"] = cost.get_description()
    data["optimizer"] = optimizer.get_description()
    return RunConfig(data, source)


def example_main(network, settings, doc=None, argv=None, source=None):
    """Parse the flags, then train ``network`` (see :func:`example_config`); returns the exit
    status (0, or 1 after a one-line error)."""
    parser = argparse.ArgumentParser(prog=source or sys.argv[0], description=doc)
    add_run_arguments(parser)
    args = parser.parse_args(argv)

    def run():
        config = example_config(network, settings, source or parser.prog)
        train(config.override(**overrides(args)), args)
    return run_guarded(run, args.verbose, parser.prog, args.quiet)
