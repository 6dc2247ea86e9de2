"""The one rule for every path a user names for neonlite to write (``train --save-path``,
``-o`` training logs, ``--profile`` / ``--trace``, ``import -o``, ``export -o``, ``plot -o``,
the checkpoints and logs of callbacks), checked before any work:

* the path is not empty, and its folder exists and is a folder this process can write in;
* the target is absent or a regular file: a symlink, folder, device, FIFO or socket there is
  refused, never replaced (as root, ``-o /dev/null`` would otherwise put a regular file in the
  place of the system's ``/dev/null``);
* the temporary name the writer will use (:func:`neonlite.atomic.atomic_write`) can be made in
  its folder: made and removed at once, so a read-only or virtual folder (``/proc``) or a name
  too long for the file system fails now, not after training;
* it is none of the run's inputs (its YAML, data files, ``--model-file``, a Hugging Face
  source folder and every file in it) and no other output: the same resolved path, or the same
  file by ``st_dev`` / ``st_ino`` (a hard link, another spelling through ``..``).

A folder output (``neonlite export -o DIR``) must be absent or a folder the command recognises
as its own earlier output (``replaceable``); it is written whole into a sibling temporary
folder and swapped into place (:mod:`neonlite.folder_swap`).

:func:`check_outputs` applies the rule to a run's outputs and inputs together; every command
calls it before it reads its inputs.  Each refusal is an :class:`OutputPathError`: one line
naming the flag, the path, what is wrong and what to do.
"""
import errno
import os
import stat
from pathlib import Path

from .atomic import try_temporary
from .safe_files import file_kind

#: what the kind of an existing non-regular target is called in messages

class OutputPathError(ValueError):
    """An output path that would destroy something or could not be written; the message is
    one line naming the flag and the path."""


def check_outputs(outputs, inputs=()):
    """Apply the module's rule: ``outputs`` and ``inputs`` are ``(what, path)`` pairs (``what``:
    how messages name it, e.g. ``"--save-path"``; pairs whose path is None are skipped);
    inputs may be files or folders.  An output given as ``(what, path, "folder",
    replaceable)`` is a folder output (see :func:`check_output_folder`).  Raises
    :class:`OutputPathError` on the first problem; returns the outputs' absolute paths."""
    inputs = [(what, path) for what, path in inputs if path is not None]
    checked = []
    for what, path, *folder in outputs:
        if path is None:
            continue
        target = check_output_folder(path, what, *folder[1:]) if folder else \
            check_output(path, what)
        for in_what, in_path in inputs:
            if _overlaps(target, Path(in_path), bool(folder)):
                raise OutputPathError(f"{what} {path}: is {in_what} {in_path}, an input of this "
                                      f"run, which writing would destroy; choose another name")
        for other_what, other_path, other in checked:
            if _overlaps(target, other, bool(folder)) or _overlaps(other, target, False):
                raise OutputPathError(f"{what} {path}: is also the path of {other_what} "
                                      f"{other_path}; give each output its own file")
        checked.append((what, path, target))
    return [target for _, _, target in checked]


def check_output(path, what="output"):
    """The absolute path of file output ``path`` after the type, folder and temporary-name
    checks of the module's rule (not the overlap ones: see :func:`check_outputs`)."""
    target = _absolute(path, what)
    kind = _kind(target)
    if kind == "a folder":
        raise OutputPathError(f"{what} {path}: is a folder; give a file name (inside it, or "
                              f"beside it)")
    if kind is not None:
        raise OutputPathError(f"{what} {path}: is {kind}{_link_target(target)}; neonlite "
                              f"writes only new or regular files and never replaces or writes "
                              f"through anything else: choose another name")
    _check_folder_above(target, path, what)
    return target


def check_output_folder(path, what="output folder", replaceable=lambda folder: False):
    """The absolute path of folder output ``path``: absent, or a folder for which
    ``replaceable(folder)`` is true (the command's own earlier output); the folder above must
    take the sibling temporary folder the output is written into first."""
    target = _absolute(path, what, "folder")
    kind = _kind(target)
    if kind == "a folder" and not replaceable(target):
        raise OutputPathError(f"{what} {path}: is a folder that is not an earlier output of "
                              f"this command (it holds {_some_names(target)}); give a new "
                              f"folder name, or an earlier export's folder to replace it")
    if kind is None and os.path.lexists(target):
        kind = "a file"
    if kind not in (None, "a folder"):
        raise OutputPathError(f"{what} {path}: is {kind}{_link_target(target)}, not a folder; "
                              f"choose another name")
    _check_folder_above(target, path, what)
    return target


def _absolute(path, what, noun="file"):
    text = os.fspath(path) if path is not None else ""
    if not str(text).strip():
        raise OutputPathError(f"{what}: an empty path; give a {noun} name")
    return Path(os.path.abspath(text))


def _kind(target):
    """None when ``target`` is absent or a regular file, else the words for what is there."""
    try:
        mode = os.lstat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    return None if stat.S_ISREG(mode) else file_kind(mode)


def _link_target(target):
    try:
        return f" (to {os.readlink(target)})"
    except OSError:
        return ""


def _some_names(folder, count=3):
    try:
        names = sorted(os.listdir(folder))
    except OSError as err:
        return f"entries that cannot be listed: {err.strerror}"
    if not names:
        return "nothing"
    return ", ".join(names[:count]) + (f" and {len(names) - count} more" if len(names) > count
                                       else "")


def _check_folder_above(target, path, what):
    """The target's folder must exist and be a folder this process can write in: a
    temporary of the writer's kind is made there and removed at once."""
    above = target.parent
    if not os.path.lexists(above):
        raise OutputPathError(f"{what} {path}: the folder {above} does not exist")
    if not above.is_dir():
        raise OutputPathError(f"{what} {path}: {_first_non_folder(above)} is not a folder")
    try:
        try_temporary(target)
    except OSError as err:
        raise OutputPathError(_cannot_write(err, target, path, what)) from None


def _first_non_folder(path):
    """The first entry on the way to ``path`` that exists and is not a folder."""
    for part in reversed(path.parents):
        if os.path.lexists(part) and not part.is_dir():
            return part
    return path


def _cannot_write(err, target, path, what):
    if err.errno == errno.ENAMETOOLONG:
        return (f"{what} {path}: the name is too long: its temporary name "
                f"{_temporary_name(target.name)[:40]}... must fit in {_name_max(target.parent)} "
                f"bytes; choose a shorter name")
    return f"{what} {path}: cannot write in {target.parent} ({err.strerror or err})"


def _temporary_name(name):
    """The length-equivalent of the temporary name of ``name`` (``.<name>.<8>.tmp<pid>``)."""
    return f".{name}.XXXXXXXX.tmp{os.getpid()}"


def _name_max(folder):
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _overlaps(output, other, output_is_folder):
    """True when writing ``output`` would change ``other`` (an input or an output): the same
    resolved path or file; ``other`` inside folder ``output`` (a folder output replaces all it
    holds); or ``output`` an existing entry inside folder ``other`` (a model folder's files)."""
    mine, theirs = Path(os.path.realpath(output)), Path(os.path.realpath(other))
    if mine == theirs or _same_file(output, other):
        return True
    if output_is_folder and theirs.is_relative_to(mine):
        return True
    return theirs.is_dir() and mine.is_relative_to(theirs) and os.path.lexists(output)


def _same_file(a, b):
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return False
