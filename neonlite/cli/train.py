"""``neonlite train FILE.yaml [flags]``: train the network a YAML file describes;
``neonlite train --resume CKPT.h5 [flags]``: continue the run a checkpoint holds (its model
description and run settings; a YAML given too is optional, and flags override either)."""
from ..config.errors import ConfigError
from ..config.run import RunConfig
from ..serialize import read_checkpoint
from .arguments import add_run_arguments, overrides
from .data_option import add_data_argument, with_data
from .session import train
from ..profiler import Profile

HELP = "train the network described by a YAML file (or continue a checkpoint's run)"


def register(subparsers):
    parser = subparsers.add_parser("train", help=HELP, description=HELP + "; flags override "
                                   "the file's values")
    parser.add_argument("config", metavar="FILE.yaml", nargs="?",
                        help="the run: backend, epochs, batchsize, dataset, layers, cost, "
                             "optimizer, callbacks (optional with --resume: the checkpoint "
                             "holds the run)")
    add_run_arguments(parser)
    add_data_argument(parser)
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="record steps (see --profile-steps) as a Chrome trace; under "
                             "mpirun each rank writes TRACE.rank{r}.json and rank 0 also a "
                             "merged TRACE.json")
    parser.add_argument("--profile-steps", metavar="A:B", default="5:15",
                        help="with --profile, the steps to record: A to B-1, counted from 0 "
                             "(default 5:15)")
    parser.set_defaults(func=command)


def command(args):
    run = run_config(args).override(**overrides(args))
    if args.data:
        run.settings["dataset"] = with_data(run.settings["dataset"], args.data)
    if not args.profile:
        train(run, args)
        return
    with Profile(args.profile, args.profile_steps, "--profile-steps", "--profile") as profile:
        train(run, args)
    if profile.path in profile.written and not args.quiet:
        print(f"profile: steps {profile.first}..{profile.last - 1} -> "
              f"{', '.join(profile.written)}")


def run_config(args):
    """The run to train: the YAML's, else (``--resume`` alone) the one the checkpoint holds.
    A resumed run saves where the interrupted one did unless a save path is given: the
    checkpoint's recorded ``save_path``, else the checkpoint itself."""
    if args.config is None and args.resume is None:
        raise ConfigError("train: give the run's FILE.yaml, or --resume CKPT.h5 to continue "
                          "the run a checkpoint holds")
    if args.resume is None:
        return RunConfig.from_file(args.config)
    ckpt = read_checkpoint(args.resume)
    run = RunConfig.from_file(args.config) if args.config is not None else \
        RunConfig.from_description(ckpt.config, args.resume)
    if run.settings["save_path"] is None:
        run.settings["save_path"] = ckpt.config.get("save_path") or str(args.resume)
    return run
