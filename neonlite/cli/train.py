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
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="record steps (see --profile-steps) as a Chrome trace; under "
                             "mpirun each rank writes TRACE.rank{r}.json and rank 0 also a "
                             "merged TRACE.json")
    parser.add_argument("--profile-steps", metavar="A:B", default="5:15",
                        help="with --profile, the steps to record: A to B-1, counted from 0 "
                             "(default 5:15)")
    parser.set_defaults(func=command)


def command(args):
    run = RunConfig.from_file(args.config).override(**overrides(args))
    if not args.profile:
        train(run, args)
        return
    from ..profiler import Profile
    with Profile(args.profile, args.profile_steps, "--profile-steps", "--profile") as profile:
        train(run, args)
    if profile.path in profile.written and not args.quiet:
        print(f"profile: steps {profile.first}..{profile.last - 1} -> "
              f"{', '.join(profile.written)}")
