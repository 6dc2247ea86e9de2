"""``neonlite plot LOG.h5 -o curves.png``: training and validation curves from a training log
(needs matplotlib: ``pip install 'neonlite[plot]'``)."""
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..config.errors import ConfigError
from ..output_paths import check_outputs
from ..training_log import read_log
from .arguments import add_verbosity
from .errors import CommandUnavailable

HELP = "plot the training cost and validation metric of a training log"


def register(subparsers):
    parser = subparsers.add_parser("plot", help=HELP, description=HELP)
    parser.add_argument("log", metavar="LOG.h5", help="a log written by neonlite train -o")
    parser.add_argument("-o", "--output", metavar="curves.png", default="curves.png",
                        help="image to write (format from the extension; default curves.png)")
    add_verbosity(parser, quiet="do not print the name of the image written")
    parser.set_defaults(func=command)


def command(args):
    check_outputs([("-o", args.output)], [("the training log", args.log)])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandUnavailable("neonlite plot needs matplotlib: pip install "
                                 "'neonlite[plot]' (or pip install matplotlib)") from None
    out = Path(args.output)
    kind = image_format(plt, out)
    log = read_log(args.log)
    figure = draw(plt, log, Path(args.log).name)
    try:
        with atomic_write(out) as file:
            figure.savefig(file, format=kind, dpi=120)
    finally:
        plt.close(figure)
    if not args.quiet:
        print(f"wrote {out}")


def image_format(plt, out):
    """The image format of ``out``'s extension (none: png); a ConfigError naming the
    formats matplotlib writes when it writes no such format."""
    kind = out.suffix.lstrip(".").lower() or "png"
    known = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if kind not in known:
        raise ConfigError(f"-o {out}: matplotlib writes no '.{kind}' images; use one of "
                          f"{', '.join('.' + k for k in sorted(known))}")
    return kind


def draw(plt, log, title):
    """A figure: batch cost (and each epoch's mean, at the middle of its epoch) against
    epochs, and the validation metric after each epoch; epochs are integer ticks.  The title
    says "(in progress)" while the run goes on, "(ended early)" when a signal stopped it."""
    from matplotlib.ticker import MaxNLocator
    batch, epoch = log["batch"], log["epoch"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if len(batch["cost"]):
        position = _batch_positions(batch["epoch"])
        left.plot(position, batch["cost"], lw=0.6, alpha=0.5, label="batch cost")
    left.plot(epoch["index"] + 0.5, epoch["train_cost"], "o-", label="epoch mean")
    left.set_xlabel("epoch")
    left.set_ylabel("training cost")
    left.legend()
    evaluated = ~np.isnan(epoch["metric"])
    right.plot(epoch["index"][evaluated] + 1, epoch["metric"][evaluated], "o-", color="C1")
    right.set_xlabel("after epoch")
    right.set_ylabel(f"validation {log['metric'] or 'metric'}")
    for axes in (left, right):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    state = "" if log["complete"] else \
        " (ended early)" if log.get("interrupted") else " (in progress)"
    figure.suptitle(f"{title}{state}")
    figure.tight_layout()
    return figure


def _batch_positions(epochs):
    """x position of each batch: its epoch plus its fraction through that epoch."""
    position = np.empty(len(epochs))
    for e in np.unique(epochs):
        where = np.flatnonzero(epochs == e)
        position[where] = e + (np.arange(len(where)) + 1) / len(where)
    return position
