"""``neonlite train FILE.yaml [flags]``: train the network a YAML file describes."""
from ..config.run import RunConfig
from .arguments import add_run_arguments, overrides
from .session import train

HELP = "train the network described by a YAML file"


def register(subparsers):
    parser = subparsers.add_parser("train", help=HELP, description=HELP + "; flags override "
                                   "the file's values")
    parser.add_argument("config", metavar="FILE.yaml", help="the run: backend, epochs, "
                        "batchsize, dataset, layers, cost, optimizer, callbacks")
    add_run_arguments(parser)
    parser.set_defaults(func=command)


def command(args):
    run = RunConfig.from_file(args.config).override(**overrides(args))
    train(run, args)
