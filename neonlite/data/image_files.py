"""The files of an image data set: a folder with one subfolder per class, or a manifest (CSV or
TSV of ``path,label`` lines, like aeon's), listed once into :class:`ImageFiles`.

Every check a listing can make is made here, before any image is decoded: a missing or
unreadable folder, a class folder with no images, a file that is not a PNG or JPEG by its
name, a manifest line with a missing file, a bad label or the wrong number of fields.
"""
import csv
import io
import os
import stat
from pathlib import Path

import numpy as np

from ..safe_files import file_kind, read_bounded
from .iterator import DataError

#: the file names an image folder takes (lower-cased suffix)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: the largest manifest read (bytes)
MAX_MANIFEST_BYTES = 1 << 30


class ImageFiles:
    """``n`` image paths with their class indices, stored as arrays (no Python list of ``str``,
    so worker processes that get a copy never touch per-file objects and memory stays flat).

    Fields: ``blob`` uint8 (total bytes,): the UTF-8 paths end to end; ``ends`` int64 (n,):
    where each path ends in ``blob``; ``labels`` int32 (n,): class indices into ``classes``
    (a tuple of class names, sorted); ``source``: the folder or manifest listed (for
    messages).
    """

    def __init__(self, paths, labels, classes, source):
        encoded = [os.fsencode(p) for p in paths]
        self.ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        self.blob = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        self.labels = np.asarray(labels, dtype=np.int32)
        self.classes, self.source = tuple(classes), str(source)

    def __len__(self):
        return len(self.labels)

    def path(self, i):
        """The path of file ``i`` (a str)."""
        start = int(self.ends[i - 1]) if i else 0
        return os.fsdecode(self.blob[start:int(self.ends[i])].tobytes())

    def take(self, idx, source=None):
        """The files at indices ``idx`` (same classes)."""
        return ImageFiles([self.path(int(i)) for i in idx], self.labels[idx], self.classes,
                          source or self.source)


def list_folder(root, classes=None):
    """:class:`ImageFiles` of folder ``root``: each subfolder a class (sorted by name, hidden
    ones skipped), each holding ``.png`` / ``.jpg`` / ``.jpeg`` files (hidden files skipped).
    ``classes``: the class names to use (a validation folder takes its training folder's);
    a subfolder not among them is an error."""
    root = Path(root)
    folders = _class_folders(root)
    names = [f.name for f in folders]
    if classes is None:
        classes = tuple(names)
    else:
        extra = [n for n in names if n not in classes]
        if extra:
            raise DataError(f"{root / extra[0]}: class folder '{extra[0]}' is not a class of the "
                            f"training set ({_few(classes)})")
    index = {name: i for i, name in enumerate(classes)}
    paths, labels = [], []
    for folder in folders:
        found = _images_in(folder)
        paths += found
        labels += [index[folder.name]] * len(found)
    return ImageFiles(paths, labels, classes, root)


def _class_folders(root):
    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise DataError(f"{root}: no such image folder") from None
    except OSError as err:
        raise DataError(f"{root}: cannot read the image folder ({err.strerror})") from None
    if not stat.S_ISDIR(info.st_mode):
        raise DataError(f"{root}: not a folder ({file_kind(info.st_mode)}); an image folder "
                        f"holds one subfolder per class")
    folders = sorted((e for e in _entries(root) if not e.name.startswith(".") and
                      e.is_dir()), key=lambda e: e.name)
    if not folders:
        raise DataError(f"{root}: no class folders (expected one subfolder per class, each "
                        f"holding its .png / .jpg images)")
    return [Path(e.path) for e in folders]


def _images_in(folder):
    paths = []
    for entry in sorted(_entries(folder), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if not entry.name.lower().endswith(IMAGE_SUFFIXES):
            raise DataError(f"{entry.path}: not an image file by its name (an image folder "
                            f"holds only {', '.join(IMAGE_SUFFIXES)} files)")
        try:
            info = os.stat(entry.path)
        except OSError as err:
            raise DataError(f"{entry.path}: cannot read the image ({err.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{entry.path}: not a regular file ({file_kind(info.st_mode)}); "
                            f"images must be plain files")
        paths.append(entry.path)
    if not paths:
        raise DataError(f"{folder}: empty class folder (no {', '.join(IMAGE_SUFFIXES)} files); "
                        f"remove it or add its images")
    return paths


def _entries(folder):
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError as err:
        raise DataError(f"{folder}: cannot list the folder ({err.strerror})") from None


def read_manifest(path, classes=None):
    """:class:`ImageFiles` of manifest ``path``: one ``image path, label`` per line, separated
    by a tab (``.tsv``, or any line holding a tab) or a comma; paths relative to the
    manifest's folder; lines empty or starting with ``#`` or ``@`` (aeon's header) skipped.
    Labels are class names (the classes are their sorted set) or, when every label is a
    whole number, class indices 0..max (classes named "0", "1", ...).  ``classes``: the
    training set's class names (a validation manifest's labels must be among them)."""
    path = Path(path)
    text = read_bounded(path, MAX_MANIFEST_BYTES, DataError, "manifest")
    try:
        text = text.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: the manifest is not UTF-8 text (byte {err.start})") from None
    rows = _manifest_rows(path, text)
    if not rows:
        raise DataError(f"{path}: the manifest lists no images (expected lines 'path,label')")
    names = [label for _, _, label in rows]
    if classes is None:
        numeric = all(n.isdigit() for n in names)
        top = max(int(n) for n in names) if numeric else 0
        if numeric and top >= len(rows) + 1024:
            line = next(ln for ln, _, n in rows if int(n) == top)
            raise DataError(f"{path}:{line}: label {top} is far beyond the {len(rows)} images "
                            f"listed (class indices count from 0)")
        classes = tuple(str(i) for i in range(top + 1)) if numeric else tuple(sorted(set(names)))
    index = {name: i for i, name in enumerate(classes)}
    paths, labels = [], []
    for line, file, label in rows:
        if label not in index:
            raise DataError(f"{path}:{line}: label {label!r} is not a class of the training "
                            f"set ({_few(classes)})")
        paths.append(_manifest_file(path, line, file))
        labels.append(index[label])
    return ImageFiles(paths, labels, classes, path)


def _manifest_rows(path, text):
    rows = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#@":
            continue
        delimiter = "\t" if "\t" in line or path.suffix.lower() == ".tsv" else ","
        fields = [f.strip() for f in next(csv.reader(io.StringIO(line), delimiter=delimiter))]
        if len(fields) != 2 or not fields[0] or not fields[1]:
            raise DataError(f"{path}:{number}: expected 'path{delimiter}label' (two fields), "
                            f"got {line[:80]!r}")
        if fields[1].lstrip("-").isdigit() and fields[1].startswith("-"):
            raise DataError(f"{path}:{number}: label {fields[1]} is negative (class indices "
                            f"count from 0)")
        rows.append((number, fields[0], fields[1]))
    return rows


def _manifest_file(manifest, line, name):
    file = Path(name)
    file = file if file.is_absolute() else manifest.parent / file
    if not name.lower().endswith(IMAGE_SUFFIXES):
        raise DataError(f"{manifest}:{line}: {file} is not an image file by its name "
                        f"(expected {', '.join(IMAGE_SUFFIXES)})")
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise DataError(f"{manifest}:{line}: {file}: no such file") from None
    except OSError as err:
        raise DataError(f"{manifest}:{line}: {file}: cannot read the file "
                        f"({err.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise DataError(f"{manifest}:{line}: {file}: not a regular file "
                        f"({file_kind(info.st_mode)})")
    return str(file)


def split_fraction(files, fraction, seed=0):
    """(train, valid) :class:`ImageFiles`: ``fraction`` of each class's files (at least one,
    chosen by a fixed seed, not the run's) held out for validation."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or \
            not 0 < fraction < 1:
        raise DataError(f"{files.source}: valid_fraction must be a number between 0 and 1, got "
                        f"{fraction!r}")
    rng = np.random.default_rng(seed)
    held = []
    for label in range(len(files.classes)):
        members = np.flatnonzero(files.labels == label)
        if members.size == 0:
            continue
        count = max(1, int(round(members.size * fraction)))
        if count >= members.size:
            raise DataError(f"{files.source}: class '{files.classes[label]}' has "
                            f"{members.size} image(s), too few to hold out "
                            f"{fraction:g} of them and train on the rest")
        held.append(rng.permutation(members)[:count])
    held = np.sort(np.concatenate(held))
    keep = np.setdiff1d(np.arange(len(files)), held)
    return files.take(keep), files.take(held, f"{files.source} (held-out {fraction:g})")


def _few(names, limit=8):
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... {len(names)} in all" if len(names) > limit else "")
