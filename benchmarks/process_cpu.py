"""CPU seconds used by a process and its loader workers, for the image-loader benchmark: a
loaded machine stretches the wall clock but much less the CPU time each image takes, so
``2 cores / (CPU seconds per image)`` estimates what an idle 2-core machine would give.
Imports nothing from neonlite or torch (``image_loader_torch.py`` runs it as a plain
module beside itself)."""
import os
import resource

TICKS = os.sysconf("SC_CLK_TCK")


def process_seconds(pid):
    """User + system CPU seconds of process ``pid`` so far (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def tree_seconds(worker_pids):
    """User + system CPU seconds of this process and of ``worker_pids`` so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + sum(process_seconds(pid) for pid in worker_pids)
