"""``neonlite describe FILE.yaml|CKPT.h5``: the model table (layer, type, output shape,
parameters) without training."""
from ..backends import gen_backend
from ..config.data_files import resolve_data_files
from ..config.datasets import make_dataset
from ..config.run import RunConfig
from ..model import Model
from ..serialize import ShapeStub, read_checkpoint
from .arguments import add_verbosity, batch_size
from .session import initialize
from ..config.errors import ConfigError
from ..profiler.memory_table import format_memory, run_once

HELP = "print the model table (layers, output shapes, parameters) without training"


def register(subparsers):
    parser = subparsers.add_parser("describe", help=HELP, description=HELP)
    parser.add_argument("file", metavar="FILE.yaml|CKPT.h5")
    parser.add_argument("--memory", action="store_true",
                        help="a YAML network's memory per layer (parameters, gradients, "
                             "optimizer state, activations, workspaces) for the batch size")
    parser.add_argument("-z", "--batch-size", type=batch_size, dest="batchsize",
                        metavar="BATCH", help="with --memory: the batch size (YAML: batchsize)")
    add_verbosity(parser, quiet=None)
    parser.set_defaults(func=command)


def command(args):
    if args.memory:
        return memory_command(args)
    gen_backend("cpu", batch_size=1)
    if args.file.endswith((".h5", ".hdf5")):
        ckpt = read_checkpoint(args.file)
        model = Model.from_checkpoint(ckpt)
        source = f"checkpoint {args.file} (epoch {ckpt.epoch_index}), input {ckpt.in_shape}"
    else:
        run = RunConfig.from_file(args.file)
        data = make_dataset(resolve_data_files(run.settings["dataset"], run.folder))
        run.size_layers(data)
        model = run.build_model()
        initialize(model, ShapeStub(data.shape, data.name), None)
        classes = getattr(data, "nclass", None)
        source = f"{args.file}: data set {data.name}, input {tuple(data.shape)}" + \
            (f", {classes} classes" if classes else "")
    print(source)
    print(model.describe())


def memory_command(args):
    """``--memory``: build the YAML's network for its batch size on the CPU backend and print
    the bytes each layer holds (no training; optimizer state from a trial update)."""
    if args.file.endswith((".h5", ".hdf5")):
        raise ConfigError(f"{args.file}: --memory takes a YAML file (it needs the batch size "
                          f"and optimizer of a run)")
    run = RunConfig.from_file(args.file).override(batchsize=args.batchsize)
    batch = run.settings["batchsize"]
    gen_backend("cpu", batch_size=batch)
    data = make_dataset(resolve_data_files(run.settings["dataset"], run.folder))
    run.size_layers(data)
    model = run.build_model()
    initialize(model, ShapeStub(data.shape, data.name), None)
    run_once(model)
    print(f"{args.file}: batch {batch}, input {tuple(data.shape)}, float32 on the cpu backend; "
          f"one fprop and bprop pass on zeros made the lazily allocated workspaces (no update)")
    print(format_memory(model, run.build_optimizer()))
