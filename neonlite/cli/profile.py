"""``neonlite profile FILE.yaml [-b cpu|gpu] [-d TYPE] [--steps N] [--warmup W] [--synthetic]
[--json]``:
build the network, run W warm-up steps and N profiled steps on the YAML's data (or on random
data of the right shape), and print one row per layer, then the optimizer, data and
communication rows and the step total."""
import json
import sys
import warnings

from ..backends import available_backends, get_backend
from ..callbacks import Callbacks
from ..config.data_files import resolve_data_files
from ..config.datasets import make_dataset
from ..config.errors import ConfigError
from ..config.run import RunConfig
from ..config.settings import DATATYPES
from ..data.iterator import DataError
from ..optimizers.mixed_precision import MixedPrecision, for_datatype
from ..output_paths import check_outputs
from ..profiler import Profile
from ..profiler.report import format_table
from ..profiler.session import steps_for_epochs
from ..profiler.synthetic import SyntheticBatches, first_vocab
from ..serialize import ShapeStub
from .arguments import add_verbosity, batch_size, non_negative_int, positive_int
from .session import initialize, load_data, make_backend

HELP = "time each layer of a YAML network for a few steps (ms, GFLOP/s, memory)"


def register(subparsers):
    parser = subparsers.add_parser("profile", help=HELP, description=HELP + "; the rows are "
                                   "means per step, and the timed rows add up to the measured "
                                   "step")
    parser.add_argument("config", metavar="FILE.yaml")
    parser.add_argument("-b", "--backend", choices=available_backends(),
                        help="compute backend (YAML: backend)")
    parser.add_argument("-z", "--batch-size", type=batch_size, dest="batchsize",
                        metavar="BATCH", help="minibatch size (YAML: batchsize)")
    parser.add_argument("-d", "--datatype", choices=list(DATATYPES),
                        help="storage type of parameters and activations, as neonlite "
                             "train's (YAML: datatype)")
    parser.add_argument("--steps", type=positive_int, default=10, metavar="N",
                        help="profiled steps (default 10)")
    parser.add_argument("--warmup", type=non_negative_int, default=5, metavar="W",
                        help="steps run before the profiled ones (default 5)")
    parser.add_argument("--synthetic", action="store_true",
                        help="random inputs and targets of the data set's shapes instead of "
                             "its data (no data files needed)")
    parser.add_argument("--data-dir", metavar="DIR", help="data root (as neonlite train)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--trace", metavar="TRACE.json",
                        help="also write the Chrome trace of the profiled steps")
    add_verbosity(parser)
    parser.set_defaults(func=command)


def command(args):
    run = RunConfig.from_file(args.config).override(backend=args.backend,
                                                    batchsize=args.batchsize,
                                                    datatype=args.datatype)
    settings = run.settings
    total = args.warmup + args.steps
    check_outputs([("--trace", args.trace)], [("the run's YAML", args.config)])
    profile = Profile(args.trace, (args.warmup, total), "--warmup/--steps", "--trace")
    make_backend(settings)
    if run.auto_layers is not None:  # sizes from the data (vocab: auto) before the model
        run.size_layers(make_dataset(resolve_data_files(settings["dataset"], run.folder,
                                                        args.data_dir), args.data_dir))
    model, cost = run.build_model(), run.build_cost()
    optimizer = for_datatype(run.build_optimizer(), settings["datatype"],
                             settings["bf16_rounding"])
    cost = optimizer.wrap_cost(cost) if isinstance(optimizer, MixedPrecision) else cost
    data = _data(args, run, model, total)
    initialize(model, data, cost)
    epochs = steps_for_epochs(total, len(data))
    with profile, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "CosineSchedule")  # a profile is not the whole run
        model.fit(data, optimizer, epochs, cost, Callbacks(model, progress=False))
    report = profile.rows()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    print(f"{args.config}: {args.steps} steps after {args.warmup} warm-up, backend "
          f"{settings['backend']}, batch {settings['batchsize']}, {settings['datatype']}"
          + (", synthetic data" if args.synthetic else f", data set {data.name}"))
    print(format_table(report, profile.peak_note))
    if profile.written:
        print(f"trace: {', '.join(profile.written)}")


def _data(args, run, model, total):
    """The training batches: the YAML's data set cut to ``total`` batches per epoch, or
    synthetic batches of its shapes."""
    settings = run.settings
    if args.synthetic:
        shape = make_dataset(settings["dataset"], args.data_dir).shape
        initialize(model, ShapeStub(shape, "synthetic"))
        return SyntheticBatches(get_backend(), shape, model.out_shape, total,
                                vocab=first_vocab(model))
    try:
        _, train_set, _ = load_data(settings, args.data_dir, total, valid=False,
                                    folder=run.folder)
    except (DataError, OSError) as err:
        raise ConfigError(f"{args.config}: the data of data set "
                          f"{settings['dataset']['type']!r} is missing or unreadable ({err}); "
                          f"run with --synthetic to profile on random data of the right "
                          f"shape") from None
    return train_set
