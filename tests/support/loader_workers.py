"""Image-loader worker processes seen from outside (``/proc``): the workers of a process, and
any worker whose parent has gone (left behind), for the tests that every exit path stops them."""
import os
import re
from pathlib import Path

#: what a worker's command line holds: ``worker_main(task fd, result fd, parent pid)``
WORKER = re.compile(r"image_workers import worker_main; worker_main\(\d+, \d+, (\d+)\)")


def loader_workers():
    """``{pid: parent pid named on its command line}`` of every loader worker alive."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:
            continue
        match = WORKER.search(cmdline)
        if match and _alive(int(entry.name)):
            found[int(entry.name)] = int(match.group(1))
    return found


def workers_of(pid):
    """The pids of the loader workers process ``pid`` started."""
    return sorted(w for w, parent in loader_workers().items() if parent == pid)


def orphan_workers():
    """The pids of loader workers whose parent is no longer alive (none may ever exist)."""
    return sorted(w for w, parent in loader_workers().items() if not _alive(parent))


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
