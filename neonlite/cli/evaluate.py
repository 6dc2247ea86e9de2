"""``neonlite eval CKPT.h5``: a saved model's metric on its data set's validation set."""
from ..backends import available_backends
from ..config.datasets import DATASETS, check_dataset
from ..config.errors import ConfigError
from ..model import Model
from ..serialize import read_checkpoint
from .arguments import batch_size, positive_int
from .data_option import add_data_argument, with_data
from .session import load_data, make_backend
from ..config import registry
from ..config.build import build

HELP = "evaluate a checkpoint on its data set's validation (test) set"


def register(subparsers):
    parser = subparsers.add_parser("eval", help=HELP, description=HELP)
    parser.add_argument("checkpoint", metavar="CKPT.h5")
    parser.add_argument("--data-dir", metavar="DIR", help="data root (default $NEONLITE_DATA, "
                        "else ~/.neonlite/data)")
    add_data_argument(parser, "evaluate on")
    parser.add_argument("--metric", choices=list(metric_choices()), default=None,
                        help="the metric to report (default: the run's own, as its checkpoint "
                             "names it, else misclassification)")
    parser.add_argument("--top-k", type=positive_int, default=5, metavar="K",
                        help="K of --metric topk (default 5)")
    parser.add_argument("--dataset", choices=list(DATASETS),
                        help="data set, when the checkpoint does not name one")
    parser.add_argument("-b", "--backend", choices=available_backends(),
                        help="backend (default: the checkpoint's, else cpu)")
    parser.add_argument("-z", "--batch-size", type=batch_size, dest="batchsize",
                        metavar="BATCH", help="minibatch size (default: the checkpoint's)")
    parser.add_argument("--max-batches", type=positive_int, metavar="N",
                        help="evaluate only the first N batches")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show a traceback with errors")
    parser.set_defaults(func=command)


def metric_choices():
    """``{--metric value: metric class name}`` for every registered metric: its ``name``
    (``misclassification``, ``nats_per_token``, ...), and ``topk`` for top-k
    misclassification (``--top-k``)."""
    table = {}
    for class_name, cls in registry.classes("metric").items():
        name = vars(cls).get("name")
        table["topk" if class_name == "TopKMisclassification" else name or class_name] = \
            class_name
    return table


def command(args):
    ckpt = read_checkpoint(args.checkpoint)
    config = ckpt.config
    dataset = args.dataset or config.get("dataset")
    if dataset is None:
        raise ConfigError(f"{args.checkpoint}: the checkpoint names no data set; pass "
                          f"--dataset ({', '.join(DATASETS)})")
    settings = {"backend": args.backend or config.get("backend", "cpu"),
                "batchsize": args.batchsize or config.get("batchsize", 128),
                "rng_seed": config.get("rng_seed"), "datatype": config.get("datatype", "f32"),
                "dataset": with_data(dataset, args.data) if args.data else
                check_dataset(dataset)}
    make_backend(settings)
    _, _, valid = load_data(settings, args.data_dir, args.max_batches, train=False)
    model = Model.from_checkpoint(ckpt)
    if args.metric is None:
        desc = config.get("metric", "Misclassification")
        path = f"{args.checkpoint}:/config metric"
    else:
        name = metric_choices()[args.metric]
        desc = {"type": name, "config": {"k": args.top_k} if name == "TopKMisclassification"
                else {}}
        path = "--metric"
    metric = build(desc, "metric", path)
    value = model.eval(valid, metric)
    print(f"{metric.name}: {value:.4f} ({valid.name}, epoch {ckpt.epoch_index})")
