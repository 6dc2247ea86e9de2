"""The kernel cache's row of ``neonlite doctor``: where it is, whether it can be written, how many
entries it holds and whether each is whole (its checksum matches)."""
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
    from ..kernels.cache import DiskCache, cache_dir
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
    why = _writable(root)
    if why:
        return Row("kernel cache", FAIL, f"{where} is not writable: {why}",
                   f"make it writable (chmod u+w) or {move}")
    entries = DiskCache(root).entries()
    damaged = [path.name for path, meta in entries if meta is None]
    text = f"{where}: writable, {len(entries)} entries"
    if damaged:
        shown = ", ".join(damaged[:3]) + (", ..." if len(damaged) > 3 else "")
        return Row("kernel cache", WARN, f"{text}, {len(damaged)} damaged ({shown})",
                   f"run '{CLEAR}' to clear the cache (damaged entries are also rebuilt when "
                   f"next needed)")
    return Row("kernel cache", OK, f"{text}, all whole (checksums match)")
