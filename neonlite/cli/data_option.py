"""``--data PATH`` on ``neonlite train``, ``eval`` and ``generate``: the data to use, instead
of the file the YAML (or the checkpoint) names.

What ``PATH`` is picks the kind of data (:data:`DATA_KINDS`, one row per kind: a text file or
an image folder), and the row says which option of which data set it
fills.  The run's data set must be of that kind: its other options (``seq_len``,
``split``, ...) are kept."""
from pathlib import Path

from ..config.datasets import check_dataset
from ..config.errors import ConfigError
from ..data.iterator import DataError

#: (what PATH is, in messages; test of a PATH that exists; the data set types that read it;
#: the option it fills)
DATA_KINDS = (
    ("a text file", Path.is_file, ("text", "sequences"), "filename"),
    ("an image folder", Path.is_dir, ("image_folder",), "root"),
)


def add_data_argument(parser, what="train on"):
    kinds = ", ".join(f"{kind} (data set {' or '.join(repr(t) for t in types)})"
                      for kind, _, types, _ in DATA_KINDS)
    parser.add_argument("--data", metavar="PATH",
                        help=f"the data to {what} instead of the file the run names: {kinds}")


def data_path(data):
    """``--data``'s PATH as an absolute :class:`~pathlib.Path` that exists (else a one-line
    error)."""
    path = Path(data).expanduser().absolute()
    if not path.exists():
        raise DataError(f"--data {data}: no such file or folder ({path})")
    return path


def text_file(data):
    """``--data``'s PATH for a command that takes only a text file (``generate``)."""
    path = data_path(data)
    if not path.is_file():
        raise DataError(f"--data {data}: not a text file")
    return path


def with_data(dataset, data):
    """The canonical ``dataset`` entry with ``--data``'s PATH ``data`` in the option its kind
    fills: a PATH not of the kind the run's data set reads, or of a kind it does not take,
    is a one-line error."""
    dataset = check_dataset(dataset)
    path = data_path(data)
    for kind, test, types, option in DATA_KINDS:
        if dataset["type"] in types:
            if not test(path):
                raise DataError(f"--data {data}: not {kind}")
            return {"type": dataset["type"],
                    "config": {**dataset["config"], option: str(path)}}
    for kind, test, types, option in DATA_KINDS:
        if test(path):
            readers = " or ".join(repr(t) for t in types)
            raise ConfigError(f"--data {data}: {kind}, which data set {readers} reads, "
                              f"but this run's data set is '{dataset['type']}'")
    kinds = ", ".join(kind for kind, _, _, _ in DATA_KINDS)
    raise DataError(f"--data {data}: not {kinds}")
