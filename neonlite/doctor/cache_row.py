"""The kernel cache's row of ``neonlite doctor``: where it is, whether it can be written (and by
no other user: ``kernels/cache.py``'s ownership rules), how many entries it holds, whether each
is whole (its checksum matches) and the user's own."""
import os
import tempfile
from pathlib import Path

from .report import FAIL, OK, WARN, Row, one_line

CLEAR = "neonlite kernels clean"


def _where(root):
    source = "NEONLITE_CACHE_DIR" if os.environ.get("NEONLITE_CACHE_DIR", "").strip() else None
    return f"{root} (from {source})" if source else str(root)


def _nearest_existing(path):
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path("/")


def _writable(folder):
    """None when a file can be made in ``folder``, else why not."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".tmp-doctor-")
    except OSError as err:
        return one_line(err.strerror or err)
    os.close(fd)
    os.unlink(name)
    return None


def cache_row():
    """The row; FAIL when kernels cannot be stored there, warn for damaged entries."""
    from ..kernels.cache import DiskCache, ForeignEntry, cache_dir, folder_risk
    root = cache_dir()
    where = _where(root)
    move = "set NEONLITE_CACHE_DIR to a folder you can write"
    if root.exists() and not root.is_dir():
        return Row("kernel cache", FAIL, f"{where} is a file, not a folder",
                   f"{move} (or remove that file); until then the cpu backend runs on numpy "
                   f"alone and the gpu backend cannot build its kernels")
    if not root.exists():
        base = _nearest_existing(root)
        if not base.is_dir():
            return Row("kernel cache", FAIL, f"{where} cannot be created: {base} is a file",
                       move)
        why = _writable(base)
        if why:
            return Row("kernel cache", FAIL, f"{where} does not exist and cannot be created "
                       f"in {base}: {why}", move)
        return Row("kernel cache", OK, f"{where}: not made yet (made on the first build)")
    unsafe = folder_risk(root)
    if unsafe:
        return Row("kernel cache", FAIL, f"{where}: refused: {unsafe}, so a kernel planted "
                   f"there would run as you",
                   f"chmod go-w {root} (or chmod +t, if it is yours), or {move} that only you "
                   f"can write; until then no kernel is loaded from it")
    why = _writable(root)
    if why:
        return Row("kernel cache", FAIL, f"{where} is not writable: {why}",
                   f"make it writable (chmod u+w) or {move}")
    entries = DiskCache(root).entries()
    foreign = _names([path for path, meta in entries if isinstance(meta, ForeignEntry)])
    damaged = _names([path for path, meta in entries if isinstance(meta, Exception)
                      and not isinstance(meta, ForeignEntry)])
    text = f"{where}: writable, {len(entries)} entries"
    if foreign[0] or damaged[0]:
        found = ", ".join(f"{len(names)} {kind} ({shown})" for kind, (names, shown) in
                          (("not yours", foreign), ("damaged", damaged)) if names)
        return Row("kernel cache", WARN, f"{text}, {found}",
                   f"run '{CLEAR}' to clear the cache (entries that are damaged or not yours "
                   f"are never loaded, and are rebuilt when next needed)")
    return Row("kernel cache", OK, f"{text}, all yours and whole (checksums match)")


def _names(paths):
    """``(names, the first three joined)`` of ``paths``."""
    names = [path.name for path in paths]
    return names, ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
