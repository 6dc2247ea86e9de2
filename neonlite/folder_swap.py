"""Replacing a whole folder (``neonlite export -o DIR``) so that readers, and a process killed
at any moment, see the old folder or the new one whole, never a mix of both.

``with replace_folder(DIR) as staging: ...`` hands the writer a fresh sibling folder
``.<name>.new<pid>-<random>`` (``tempfile.mkdtemp``); when the block ends, the staging folder
takes the place of ``DIR``:

* ``DIR`` absent: one ``rename``;
* ``DIR`` present, on Linux: one ``renameat2(RENAME_EXCHANGE)`` swaps the two folders
  atomically, then the staging name (now holding the old folder) is removed;
* elsewhere (or a file system that cannot exchange): ``DIR`` is renamed aside to
  ``.<name>.old<pid>-<random>``, the staging folder renamed into place, the old one removed.

A process killed in between leaves its sibling folders behind; the next ``replace_folder`` of
the same target first puts a dead process's ``.old`` folder back when ``DIR`` is missing (the
kill fell between the two renames: the old folder is whole) and removes the rest
(:func:`recover`).  On an error in the block the staging folder is removed and ``DIR`` is
untouched.
"""
import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from .atomic import fsync_dir, process_alive

#: ``renameat2`` flag: swap the two names atomically (Linux 3.15+)
RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@contextlib.contextmanager
def replace_folder(target):
    """Context manager yielding the staging folder (a ``Path``) whose content replaces folder
    ``target`` whole when the block ends without an error (see the module docstring)."""
    target = Path(os.path.abspath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    recover(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.new{os.getpid()}-",
                                    dir=target.parent))
    try:
        yield staging
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(staging, 0o777 & ~mask)
        fsync_dir(staging)
        _swap(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(target.parent)


def _swap(staging, target):
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    try:
        exchange(staging, target)
    except OSError as err:
        if err.errno not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EPERM):
            raise
        aside = target.parent / f".{target.name}.old{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(target, aside)
        os.rename(staging, target)
        shutil.rmtree(aside, ignore_errors=True)
        return
    shutil.rmtree(staging, ignore_errors=True)


def exchange(a, b):
    """Swap the names ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``);
    ``OSError(ENOSYS)`` where the C library has no ``renameat2``."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", str(a))
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


def recover(target):
    """Tidy what a killed :func:`replace_folder` of ``target`` left: when ``target`` is
    missing, the newest ``.old`` folder of a dead process goes back in its place; every other
    ``.new`` / ``.old`` sibling of a dead process (owned by this user) is removed."""
    target = Path(target)
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(new|old)(\d+)-[A-Za-z0-9_]+$")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    stale = []
    for name in names:
        match = pattern.match(name)
        path = target.parent / name
        if match and not process_alive(int(match.group(2))) and path.is_dir() and \
                not path.is_symlink() and path.stat().st_uid == os.getuid():
            stale.append((match.group(1), path))
    olds = sorted((p for kind, p in stale if kind == "old"), key=lambda p: p.stat().st_mtime)
    if olds and not os.path.lexists(target):
        os.rename(olds.pop(), target)
    for _, path in stale:
        if os.path.lexists(path):
            shutil.rmtree(path, ignore_errors=True)
