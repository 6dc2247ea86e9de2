"""Where data sets live: one folder per data set (``mnist/``, ``cifar10/``, ``text/``) under a
data root chosen by the caller, ``$NEONLITE_DATA`` or ``~/.neonlite/data``."""
import os
from pathlib import Path

ENV_VAR = "NEONLITE_DATA"
DEFAULT_ROOT = Path("~") / ".neonlite" / "data"


def resolve_data_dir(data_dir=None):
    """The data root as an absolute :class:`~pathlib.Path` (not created here).

    ``data_dir`` (the CLI's ``--data-dir``, a loader's ``path=``) wins; else ``$NEONLITE_DATA``
    when set and non-empty; else ``~/.neonlite/data``.  ``~`` is expanded in all three.
    """
    if data_dir is None or str(data_dir) == "":
        data_dir = os.environ.get(ENV_VAR) or DEFAULT_ROOT
    return Path(data_dir).expanduser().absolute()


def dataset_dir(name, data_dir=None):
    """The folder of data set ``name`` (``"mnist"``, ``"cifar10"``, ``"text"``) under the data
    root given by :func:`resolve_data_dir`."""
    return resolve_data_dir(data_dir) / name
