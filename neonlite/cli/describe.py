"""``neonlite describe FILE.yaml|CKPT.h5``: the model table (layer, type, output shape,
parameters) without training."""
from ..backends import gen_backend
from ..config.datasets import make_dataset
from ..config.run import RunConfig
from ..serialize import ShapeStub, build_model, read_checkpoint
from .arguments import add_verbosity
from .session import initialize

HELP = "print the model table (layers, output shapes, parameters) without training"


def register(subparsers):
    parser = subparsers.add_parser("describe", help=HELP, description=HELP)
    parser.add_argument("file", metavar="FILE.yaml|CKPT.h5")
    add_verbosity(parser, quiet=None)
    parser.set_defaults(func=command)


def command(args):
    gen_backend("cpu", batch_size=1)
    if args.file.endswith((".h5", ".hdf5")):
        ckpt = read_checkpoint(args.file)
        model = build_model(ckpt)
        source = f"checkpoint {args.file} (epoch {ckpt.epoch_index}), input {ckpt.in_shape}"
    else:
        run = RunConfig.from_file(args.file)
        data = make_dataset(run.settings["dataset"])
        model = run.build_model()
        initialize(model, ShapeStub(data.shape, data.name), None)
        classes = getattr(data, "nclass", None)
        source = f"{args.file}: data set {data.name}, input {tuple(data.shape)}" + \
            (f", {classes} classes" if classes else "")
    print(source)
    print(model.describe())
