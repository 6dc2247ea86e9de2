"""The command-line flags shared by ``neonlite train`` and every ``examples/<name>.py``."""
import argparse

from ..backends import available_backends
from ..config.settings import DATATYPES, MAX_BATCH
from ..optimizers.mixed_precision import ROUNDINGS


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose flag errors are one line, ``neonlite: error: <command>:
    <message> (see <prog> -h)``, with exit status 2, like every other user error."""

    def error(self, message):
        command = self.prog.split(" ", 1)[1] if " " in self.prog else self.prog
        self.exit(2, f"neonlite: error: {command}: {' '.join(message.split())} (see "
                     f"{self.prog} -h)\n")


def positive_int(text):
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text):
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def batch_size(text):
    """A batch size: a positive integer up to :data:`~neonlite.config.settings.MAX_BATCH`."""
    value = positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"expected a batch size in [1, {MAX_BATCH}] (the "
                                         f"kernels index a batch with 32-bit integers), got "
                                         f"{text!r}")
    return value


def non_negative_float(text):
    """A finite float >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _int(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def add_verbosity(parser, quiet="no progress bar or per-epoch lines (errors still print)"):
    """``-v`` (tracebacks with errors) and ``-q`` (``quiet``: what it silences; None: no
    ``-q``, for a command with nothing to silence)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true",
                       help="show a traceback with errors")
    if quiet is not None:
        group.add_argument("-q", "--quiet", action="store_true", help=quiet)


def add_run_arguments(parser):
    """The training flags; each overrides the YAML value of the same meaning."""
    parser.add_argument("-b", "--backend", choices=available_backends(),
                        help="compute backend (YAML: backend; default cpu)")
    parser.add_argument("-e", "--epochs", type=positive_int, metavar="EPOCHS",
                        help="train until this many epochs are done (YAML: epochs)")
    parser.add_argument("-z", "--batch-size", type=batch_size, dest="batchsize", metavar="BATCH",
                        help="minibatch size; under mpirun the global batch, split across "
                             "the ranks (YAML: batchsize)")
    parser.add_argument("-r", "--rng-seed", type=non_negative_int, dest="rng_seed", metavar="SEED",
                        help="random seed for initialization, shuffling and dropout "
                             "(YAML: rng_seed)")
    parser.add_argument("-d", "--datatype", choices=list(DATATYPES),
                        help="storage type of parameters and activations (YAML: datatype; "
                             "default f32)")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="data root holding mnist/, cifar10/, ... (default $NEONLITE_DATA, "
                             "else ~/.neonlite/data)")
    parser.add_argument("--eval-freq", type=non_negative_int, metavar="N",
                        help="evaluate on the validation set every N epochs, 0 never "
                             "(YAML: eval_freq; default 1)")
    parser.add_argument("--save-path", metavar="CKPT.h5",
                        help="write a checkpoint here after training (YAML: save_path)")
    parser.add_argument("--serialize", type=non_negative_int, metavar="N",
                        help="also checkpoint into --save-path every N epochs; needs "
                             "--save-path (YAML: serialize)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--model-file", metavar="CKPT.h5",
                       help="start from the weights in this checkpoint (fresh optimizer, "
                            "epoch 0)")
    start.add_argument("--resume", metavar="CKPT.h5",
                       help="continue the run saved in this checkpoint exactly (weights, "
                            "optimizer state, epoch, random state)")
    parser.add_argument("-o", "--output-file", metavar="LOG.h5", dest="output_file",
                        help="write the training log (per-batch cost, per-epoch metric and "
                             "times) here; see neonlite plot")
    parser.add_argument("--sync-bn", action="store_true", default=None, dest="sync_bn",
                        help="under mpirun, batch norm statistics over the global batch instead "
                             "of each rank's part (YAML: sync_bn)")
    parser.add_argument("--scale-lr", choices=["none", "linear"], default=None,
                        dest="scale_lr",
                        help="linear: multiply every learning rate by the batch size over the "
                             "YAML's (-z 128 on a batchsize: 32 run: x4), the linear scaling "
                             "rule for a larger global batch, e.g. under mpirun "
                             "(YAML: scale_lr; default none)")
    parser.add_argument("--bf16-rounding", choices=list(ROUNDINGS), default=None,
                        dest="bf16_rounding",
                        help="with -d bf16 on the cpu: how the float32 master weights are "
                             "rounded into the bf16 parameters each step (YAML: "
                             "bf16_rounding; default: the recipe's, see README)")
    parser.add_argument("--max-batches", type=positive_int, metavar="N",
                        help="use at most N batches per epoch for training and evaluation "
                             "(quick smoke runs)")
    add_verbosity(parser)


def overrides(args):
    """The top-level YAML values the flags in ``args`` set (None: not given)."""
    return {key: getattr(args, key, None)
            for key in ("backend", "epochs", "batchsize", "rng_seed", "datatype", "eval_freq",
                        "save_path", "serialize", "sync_bn", "scale_lr", "bf16_rounding")}
