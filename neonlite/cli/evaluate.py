"""``neonlite eval CKPT.h5``: a saved model's metric on its data set's validation set."""
from ..backends import available_backends
from ..config.datasets import DATASETS, check_dataset
from ..config.errors import ConfigError
from ..config.run import METRICS
from ..serialize import build_model, read_checkpoint
from .arguments import positive_int
from .session import load_data, make_backend

HELP = "evaluate a checkpoint on its data set's validation (test) set"


def register(subparsers):
    parser = subparsers.add_parser("eval", help=HELP, description=HELP)
    parser.add_argument("checkpoint", metavar="CKPT.h5")
    parser.add_argument("--data-dir", metavar="DIR", help="data root (default $NEONLITE_DATA, "
                        "else ~/.neonlite/data)")
    parser.add_argument("--metric", choices=["misclassification", "accuracy", "topk"],
                        default="misclassification")
    parser.add_argument("--top-k", type=positive_int, default=5, metavar="K",
                        help="K of --metric topk (default 5)")
    parser.add_argument("--dataset", choices=list(DATASETS),
                        help="data set, when the checkpoint does not name one")
    parser.add_argument("-b", "--backend", choices=available_backends(),
                        help="backend (default: the checkpoint's, else cpu)")
    parser.add_argument("-z", "--batch-size", type=positive_int, dest="batchsize",
                        metavar="BATCH", help="minibatch size (default: the checkpoint's)")
    parser.add_argument("--max-batches", type=positive_int, metavar="N",
                        help="evaluate only the first N batches")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show a traceback with errors")
    parser.set_defaults(func=command)


def command(args):
    from ..config.build import build
    ckpt = read_checkpoint(args.checkpoint)
    config = ckpt.config
    dataset = args.dataset or config.get("dataset")
    if dataset is None:
        raise ConfigError(f"{args.checkpoint}: the checkpoint names no data set; pass "
                          f"--dataset ({', '.join(DATASETS)})")
    settings = {"backend": args.backend or config.get("backend", "cpu"),
                "batchsize": args.batchsize or config.get("batchsize", 128),
                "rng_seed": config.get("rng_seed"), "datatype": config.get("datatype", "f32"),
                "dataset": check_dataset(dataset)}
    make_backend(settings)
    _, _, valid = load_data(settings, args.data_dir, args.max_batches, train=False)
    model = build_model(ckpt)
    name, options = METRICS[args.metric]
    if args.metric == "topk":
        options = {"k": args.top_k}
    metric = build({"type": name, "config": options}, "metric", "--metric")
    value = model.eval(valid, metric)
    print(f"{metric.name}: {value:.4f} ({valid.name}, epoch {ckpt.epoch_index})")
