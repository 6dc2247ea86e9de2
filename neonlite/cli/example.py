"""The shared entry point of the Python twins in ``examples/``: ``python examples/<name>.py
-b gpu -e 2`` takes the same flags as ``neonlite train`` (the same parser,
:func:`~neonlite.cli.arguments.add_run_arguments`) and runs the same code path."""
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


def example_main(network, settings, doc=None, argv=None, source=None, add_arguments=None,
                 configure=None, finish=None):
    """Parse the flags, then train ``network`` (see :func:`example_config`); returns the exit
    status (0, or 1 after a one-line error).

    An example with options of its own adds them with ``add_arguments(parser)`` (they must not
    reuse a ``neonlite train`` flag); ``configure(args)`` then returns the ``(network,
    settings)`` to train instead of the given ones, and ``finish(model, args)`` runs after
    training (e.g. to write a sample with the trained model).
    """
    parser = argparse.ArgumentParser(prog=source or sys.argv[0], description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    if add_arguments is not None:
        add_arguments(parser.add_argument_group(f"options of {parser.prog}"))
    args = parser.parse_args(argv)

    def run():
        chosen, chosen_settings = configure(args) if configure else (network, settings)
        config = example_config(chosen, chosen_settings, source or parser.prog)
        model = train(config.override(**overrides(args)), args)
        if finish is not None:
            finish(model, args)
    return run_guarded(run, args.verbose, parser.prog, args.quiet)
