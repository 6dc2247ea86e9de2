"""Finding a data file by name: an absolute name is itself; a relative one is looked for in a
list of folders, in order, and a name found nowhere is one :class:`DataError` naming every
place looked.  Data sets say which folders their files live in (``text_folders``,
``root_folders``); a YAML run puts the YAML file's own folder before those
(:mod:`neonlite.config.data_files`)."""
from pathlib import Path

from .datadir import resolve_data_dir
from .iterator import DataError


def root_folders(data_dir=None):
    """The data root (see :func:`resolve_data_dir`): where HDF5 files are looked for."""
    return [resolve_data_dir(data_dir)]


def text_folders(data_dir=None):
    """``<data root>/text/`` then the data root: where text files are looked for."""
    root = resolve_data_dir(data_dir)
    return [root / "text", root]


def find_data_file(name, folders, what="data file", folder_too=False):
    """The :class:`~pathlib.Path` of file ``name`` (``~`` expanded): itself when absolute,
    else the first ``folder / name`` that exists, which must be a regular file (a folder, FIFO
    or device there is an error, never passed over for a later folder; ``folder_too``: a
    folder is taken as well).  Not found: a :class:`DataError` saying
    ``<what> 'name' not found: looked for <each candidate>``."""
    given = Path(str(name)).expanduser()
    candidates = [given] if given.is_absolute() else \
        list(dict.fromkeys(Path(folder).expanduser().absolute() / given for folder in folders))
    for candidate in candidates:
        if candidate.is_file() or folder_too and candidate.is_dir():
            return candidate
        if candidate.exists():
            raise DataError(f"{what} {str(name)!r}: {candidate} is not a regular file"
                            + (" or a folder" if folder_too else ""))
    raise DataError(f"{what} {str(name)!r} not found: looked for "
                    f"{', '.join(str(c) for c in candidates)}")
