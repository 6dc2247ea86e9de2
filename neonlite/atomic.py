"""Writing a file so that readers see the old file or the whole new one, never half of one,
and nothing but the target can be written.

:func:`atomic_write` is the one way neonlite writes a file (checkpoints, training logs, plots,
downloaded data, IDX files, kernel cache entries):

1. the data goes to a fresh temporary file in the target's folder, made with
   ``tempfile.mkstemp`` (``O_CREAT | O_EXCL``, an unpredictable name
   ``.<target name>.<random>.tmp<pid>``), so a symlink or file planted at any name the writer
   might choose is never opened, let alone written through;
2. the writer gets that file as an open binary file object (never a path to reopen);
3. the file is flushed, given the permissions a plain ``open`` would (``0o666 & ~umask``),
   ``fsync``-ed, renamed over the target (``os.replace``: a symlink at the target is replaced,
   not followed; a folder, device, FIFO or socket there is refused, before and after the
   write), and the folder is ``fsync``-ed so the rename survives a power cut.

On any error (or Ctrl-C) the temporary file is removed and the target is untouched; an
``OSError`` that names no file (a full disk: ``write`` or ``fsync`` failing with ENOSPC) is
raised again naming the target.  A process
killed mid-write (SIGKILL) leaves its temporary behind: :func:`remove_stale_temporaries`, which
:func:`atomic_write` runs first, removes the temporaries of the same target whose process is
gone (the pid is in the name); those it cannot remove (another user's) are named in a
warning.
"""
import contextlib
import errno
import os
import re
import stat
import tempfile
import warnings
from pathlib import Path


def _temp_pattern(name):
    """Temporary names of target ``name``: ``.<name>.<random>.tmp<pid>`` (this module) and
    ``.<name>.tmp<pid>`` (neonlite before it)."""
    return re.compile(rf"^\.{re.escape(name)}\.(?:[A-Za-z0-9_]+\.)?tmp(\d+)$")


def process_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path):
    """Remove the temporaries of target ``path`` left by processes that no longer run (only
    regular files and symlinks owned by this user; a symlink is removed, never followed).
    Returns ``[name]`` of stale temporaries that could not be removed."""
    path = Path(path)
    pattern = _temp_pattern(path.name)
    left = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return left
    for name in names:
        match = pattern.match(name)
        if not match or int(match.group(1)) == os.getpid() or process_alive(int(match.group(1))):
            continue
        candidate = path.parent / name
        try:
            info = os.lstat(candidate)
            if info.st_uid != os.getuid() or not (stat.S_ISREG(info.st_mode)
                                                  or stat.S_ISLNK(info.st_mode)):
                left.append(name)
                continue
            os.unlink(candidate)
        except FileNotFoundError:
            continue
        except OSError:
            left.append(name)
    return left


def _temporary_affixes(path):
    """``(prefix, suffix)`` of the temporary names of target ``path``."""
    return f".{Path(path).name}.", f".tmp{os.getpid()}"


def try_temporary(path):
    """Make, and remove at once, a temporary file of the kind :func:`atomic_write` would make
    for ``path`` (whose folder must exist): raises the ``OSError`` that writing would meet
    (a read-only or virtual folder, a name too long), before any work is done."""
    prefix, suffix = _temporary_affixes(path)
    fd, temp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=Path(path).parent)
    os.close(fd)
    os.unlink(temp)


def make_temporary(path):
    """A new, empty temporary file of target ``path`` (named as :func:`atomic_write` names
    them, so :func:`remove_stale_temporaries` knows it), for a writer that must open it by
    name (an HDF5 file kept open for appending); returns its path.  Pair with
    :func:`publish`."""
    path = Path(path)
    remove_stale_temporaries(path)
    prefix, suffix = _temporary_affixes(path)
    fd, temp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    os.close(fd)
    return temp


def publish(temp, path):
    """Rename the finished temporary ``temp`` (its data flushed) over ``path`` (a folder,
    device, FIFO or socket there is refused) and ``fsync`` the folder."""
    _refuse_special_target(path)
    os.replace(temp, path)
    fsync_dir(Path(path).parent)


def _refuse_special_target(path):
    """IsADirectoryError / FileExistsError when ``path`` is a folder, device, FIFO or socket:
    ``os.replace`` would put a regular file in its place (as root, ``/dev/null`` too).  A
    symlink at the target is replaced (never followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise FileExistsError(errno.EEXIST, "is a device, FIFO or socket, which neonlite never "
                              "replaces", str(path))


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(folder):
    """``fsync`` a folder, so a rename into it is on disk (a no-op where folders cannot be
    opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path, mode=None):
    """Context manager: ``with atomic_write(path) as f: f.write(...)`` writes ``path``
    atomically (see the module docstring).  ``f`` is an open ``"w+b"`` file object (h5py and
    matplotlib take it as it is).  ``mode``: the permission bits of the new file (default
    ``0o666`` less the umask).  Creates the target's folder when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _refuse_special_target(path)
    left = remove_stale_temporaries(path)
    if left:
        warnings.warn(f"{path.parent}: stale temporary files of {path.name} that this user "
                      f"cannot remove: {', '.join(left[:3])}" + (" ..." if len(left) > 3 else ""),
                      RuntimeWarning, stacklevel=3)
    prefix, suffix = _temporary_affixes(path)
    fd, temp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "w+b") as out:
            yield out
            out.flush()
            os.fchmod(out.fileno(), mode if mode is not None else 0o666 & ~_umask())
            os.fsync(out.fileno())
        _refuse_special_target(path)
        os.replace(temp, path)
    except OSError as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if err.filename is None:
            raise type(err)(err.errno, f"{err.strerror or err} (writing it)", str(path)) \
                from err
        raise
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def remove_stale_folders(parent, prefix):
    """Remove the folders ``<parent>/<prefix><pid>-*`` (made by :func:`scratch_folder`)
    owned by this user whose process no longer runs; returns how many went."""
    import shutil
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)-[A-Za-z0-9_]+$")
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if not match or process_alive(int(match.group(1))):
            continue
        folder = os.path.join(parent, name)
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            continue
        if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


@contextlib.contextmanager
def scratch_folder(prefix):
    """A private temporary folder ``<tmp>/<prefix><pid>-<random>`` (``tempfile.mkdtemp``:
    mode 0700), removed on exit.  The folders of the same ``prefix`` left by processes that
    were killed before removing theirs go first."""
    import shutil
    parent = tempfile.gettempdir()
    remove_stale_folders(parent, prefix)
    folder = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)
    try:
        yield Path(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
