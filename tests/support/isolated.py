"""Run one hostile input in its own process, under a time and memory bound, and say what happened.

``run_isolated(argv, ...)`` starts ``argv`` (usually :func:`neonlite_argv` or :func:`python_argv`)
with its address space capped by ``RLIMIT_AS`` (so a memory bomb dies instead of taking the
machine) and kills it after ``seconds``.  It returns an :class:`Isolated`: the exit status, the
standard output and error, the wall time and the child's peak resident memory (``ru_maxrss`` from
``wait4``, the child alone, measured by a small launcher process that forks it, since Linux
carries the forking process's peak across ``exec``).  ``outcome`` classifies the run the way the attack tables do:
``one-line error``, ``success``, ``traceback``, ``hang``, ``killed by signal N``,
``several lines`` or ``status N``.

``AttackTable`` collects ``attack -> outcome -> message, seconds, peak MiB`` rows and writes them
as a TSV file, so a test can leave the table in its temporary folder and assert on the rows.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "neonlite: error: "
WARNING = "neonlite: warning: "
DEFAULT_MEMORY_MIB = 2048
DEFAULT_SECONDS = 60


def neonlite_argv(*args):
    """``python -m neonlite.cli ARGS``: the ``neonlite`` command of the installed package."""
    return [sys.executable, "-m", "neonlite.cli", *map(str, args)]


def python_argv(code):
    """``python -c CODE``: for attacks through the Python API."""
    return [sys.executable, "-c", code]


@dataclass
class Isolated:
    """What one isolated run did: ``status`` (negative: killed by that signal), ``stdout``,
    ``stderr``, ``seconds`` (wall time), ``peak_mib`` (peak resident memory of the child) and
    ``timed_out``."""
    status: int
    stdout: str
    stderr: str
    seconds: float
    peak_mib: float
    timed_out: bool

    @property
    def error_lines(self):
        """The lines of standard error that are not warnings."""
        return [line for line in self.stderr.strip().splitlines()
                if line.strip() and not line.startswith(WARNING)]

    @property
    def message(self):
        """The last line of standard error (the one-line error, where there is one)."""
        lines = self.error_lines
        return lines[-1] if lines else ""

    @property
    def outcome(self):
        if self.timed_out:
            return "hang"
        if "Traceback (most recent call last)" in self.stderr:
            return "traceback"
        if self.status < 0:
            return f"killed by signal {-self.status}"
        if self.status == 0:
            return "success"
        lines = self.error_lines
        if self.status in (1, 2) and len(lines) == 1 and lines[0].startswith(PREFIX):
            return "one-line error"
        return "several lines" if len(lines) > 1 else f"status {self.status}"


#: A small Python process that runs the attack as its own child and reports the child's
#: rusage: Linux carries a process's peak RSS (``ru_maxrss``) across ``exec``, so a child
#: forked straight from this (large) test process would report at least the test process's
#: size; a child forked from this launcher starts from the launcher's few MiB.  It applies
#: the limits in the child, writes ``maxrss_kib`` to file descriptor FD and exits with the
#: child's status (re-raising the signal that killed it).
LAUNCHER = """
import os, resource, signal, sys
fd, size, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
pid = os.fork()
if pid == 0:
    os.close(fd)
    resource.setrlimit(resource.RLIMIT_AS, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda n, f: os.kill(pid, n))
_, code, usage = os.wait4(pid, 0)
os.write(fd, str(usage.ru_maxrss).encode())
os.close(fd)
if os.WIFSIGNALED(code):
    if os.WTERMSIG(code) not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(os.WTERMSIG(code), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(code))
os._exit(os.WEXITSTATUS(code))
"""


def _launch(argv, memory_mib, report_fd):
    """``argv`` run under :data:`LAUNCHER` with ``memory_mib`` of address space."""
    return [sys.executable, "-S", "-c", LAUNCHER, str(report_fd), str(int(memory_mib) << 20),
            *argv]


def run_isolated(argv, *, cwd=None, env=None, memory_mib=DEFAULT_MEMORY_MIB,
                 seconds=DEFAULT_SECONDS, stdin=None):
    """Run ``argv`` in a new process group with at most ``memory_mib`` MiB of address space and
    ``seconds`` of wall time (then the whole group is killed).  ``env`` is added to a copy of
    this process's environment.  ``stdin``: text fed to it (none: /dev/null).  The child is
    reaped with ``wait4`` here, so ``peak_mib`` is its own peak resident memory."""
    full_env = dict(os.environ, PYTHONSAFEPATH="1", **(env or {}))
    full_env.setdefault("OMP_NUM_THREADS", "1")
    report_read, report_write = os.pipe()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(_launch(argv, memory_mib, report_write), cwd=cwd,
                                env=full_env, start_new_session=True, pass_fds=(report_write,),
                                stdin=subprocess.PIPE if stdin is not None
                                else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        os.close(report_write)
    streams = {"out": [], "err": []}
    readers = [threading.Thread(target=_drain, args=(pipe, streams[key]), daemon=True)
               for key, pipe in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    if stdin is not None:
        proc.stdin.write(stdin.encode())
        proc.stdin.close()
    status, usage, timed_out = _reap(proc.pid, start + seconds)
    proc.returncode = status
    for reader in readers:
        reader.join()
    with os.fdopen(report_read, "rb") as report:
        reported = report.read().strip()
    maxrss_kib = int(reported) if reported.isdigit() else usage.ru_maxrss
    decode = lambda chunks: b"".join(chunks).decode("utf-8", "replace")  # noqa: E731
    return Isolated(status, decode(streams["out"]), decode(streams["err"]),
                    time.monotonic() - start, maxrss_kib / 1024, timed_out)


def _drain(pipe, chunks):
    for chunk in iter(lambda: pipe.read(65536), b""):
        chunks.append(chunk)
    pipe.close()


def _reap(pid, deadline):
    """``(status, rusage, timed_out)`` of child ``pid``, killing its group at ``deadline``."""
    timed_out = False
    while True:
        done, code, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline and not timed_out:
            timed_out = True
            os.killpg(pid, signal.SIGKILL)
        time.sleep(0.01)
    status = -os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code)
    return status, usage, timed_out


class AttackTable:
    """Rows of ``attack, outcome, seconds, peak MiB, message`` written to ``path`` as TSV."""

    def __init__(self, path):
        self.path = Path(path)
        self.rows = []

    def add(self, attack, result):
        self.rows.append((attack, result.outcome, f"{result.seconds:.2f}",
                          f"{result.peak_mib:.0f}", result.message[:300]))
        self.write()
        return result

    def write(self):
        lines = ["attack\toutcome\tseconds\tpeak_mib\tmessage"]
        lines += ["\t".join(row) for row in self.rows]
        self.path.write_text("\n".join(lines) + "\n")
