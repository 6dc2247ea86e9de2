"""A time limit on MPI start-up: ``MPI_Init``, the first collective (the barrier that finds
the local ranks) and the broadcast of the initial parameters.

Inside ``MPI_Init`` no Python code of this process runs, so the limit is kept by a small
watchdog *process* (``python -m neonlite.distributed.startup``) started before MPI is.  The
rank tells it, through a pipe, each start-up stage it enters and closes the pipe when start-up
is done.  Each rank also leaves a marker file per stage in a folder shared by the ranks of the
job on one machine (``<tmp>/neonlite-mpi-<uid>-<job id>/<stage>.<rank>``).  When a stage lasts
longer than the collective timeout (``$NEONLITE_COLLECTIVE_TIMEOUT``, see
:mod:`neonlite.distributed.collective`), the watchdog prints one line naming the ranks whose
marker for that stage is missing (they did not arrive: dead or stopped; on another machine
they cannot be seen, and the line says so), removes the job's marker folder and ends the rank
with SIGTERM, so the launcher ends the job.
"""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAGES = {"init": "MPI_Init", "barrier": "the first barrier",
          "compare": "the comparison of the ranks' run descriptions",
          "broadcast": "the broadcast of the initial parameters"}
_JOB_VARS = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_JOBID", "SLURM_JOB_ID")
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def env_rank(environ=None):
    """This process's rank as the launcher's environment gives it (0 if it does not)."""
    environ = os.environ if environ is None else environ
    value = next((environ[v] for v in _RANK_VARS if environ.get(v, "").isdigit()), "0")
    return int(value)


def marker_folder(environ=None):
    """The folder of the job's stage markers (made on first use)."""
    environ = os.environ if environ is None else environ
    job = next((environ[v] for v in _JOB_VARS if environ.get(v)), str(os.getppid()))
    job = re.sub(r"[^A-Za-z0-9_.-]", "_", job)[:80]
    return Path(tempfile.gettempdir()) / f"neonlite-mpi-{os.getuid()}-{job}"


class StartupWatch:
    """The rank's side: ``enter(stage)`` for each stage of :data:`STAGES` (its time limit
    starts), ``idle()`` between stages (no limit: loading data, compiling kernels), ``done()``
    at the end (then the watchdog exits quietly and the markers go)."""

    def __init__(self, rank, size, timeout):
        self.rank, self.size, self.timeout = rank, size, timeout
        self.folder = marker_folder()
        self.folder.mkdir(mode=0o700, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "neonlite.distributed.startup", str(os.getpid()),
             str(rank), str(size), repr(timeout), str(self.folder)],
            stdin=subprocess.PIPE, text=True)
        self.stages = []

    def enter(self, stage):
        if self.proc is None:
            return
        self.stages.append(stage)
        (self.folder / f"{stage}.{self.rank}").touch()
        self.proc.stdin.write(stage + "\n")
        self.proc.stdin.flush()

    def idle(self):
        if self.proc is not None:
            self.proc.stdin.write("idle\n")
            self.proc.stdin.flush()

    def done(self):
        if self.proc is None:
            return
        self.proc.stdin.close()
        self.proc.wait()
        self.proc = None


def watch(parent, rank, size, timeout, folder):
    """The watchdog's loop (see the module docstring); returns when start-up is done or the
    rank is gone."""
    stage, deadline, pending = None, None, ""
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([sys.stdin], [], [], wait)
        if ready:
            chunk = os.read(sys.stdin.fileno(), 4096).decode()
            if not chunk:
                _remove_markers(folder, rank)
                return
            pending += chunk
            *lines, pending = pending.split("\n")
            if lines and lines[-1] == "idle":
                stage, deadline = None, None
            elif lines:
                stage, deadline = lines[-1], time.monotonic() + timeout
            continue
        missing = [r for r in range(size) if not (folder / f"{stage}.{r}").exists()]
        who = (f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
               f"arrive (dead or stopped)") if missing else \
            "every rank on this machine arrived, so a rank elsewhere did not"
        print(f"neonlite: rank {rank}/{size}: MPI start-up ({STAGES.get(stage, stage)}) did not "
              f"complete within the collective timeout of {timeout:g} s: {who}; aborting the "
              f"job (NEONLITE_COLLECTIVE_TIMEOUT sets the timeout)", file=sys.stderr, flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.kill(parent, signal.SIGTERM)
        except ProcessLookupError:
            pass
        return


def _remove_markers(folder, rank):
    for stage in STAGES:
        try:
            (folder / f"{stage}.{rank}").unlink()
        except FileNotFoundError:
            pass
    try:
        folder.rmdir()
    except OSError:
        pass


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
          Path(sys.argv[5]))
