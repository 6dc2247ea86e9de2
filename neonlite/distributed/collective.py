"""Non-blocking MPI collectives waited on with a timeout, so a rank that dies or hangs ends
the job with a message instead of a silent hang.

Every wait polls its requests (which also drives MPI's progress) and answers the liveness
pings of other ranks on a private control communicator.  When a wait passes ``timeout``
seconds, the waiting rank pings every other rank, gives them ``grace`` seconds to answer
(a rank that is itself waiting answers at once), names the ranks that did not, and aborts the
whole job (``MPI_Abort``: every rank ends, mpirun exits non-zero).

The timeout is ``Collectives(world, timeout=...)``, else ``$NEONLITE_COLLECTIVE_TIMEOUT``
(seconds), else :data:`DEFAULT_TIMEOUT`.
"""
import os
import time

import numpy as np

from .errors import DistributedError

DEFAULT_TIMEOUT = 120.0
#: the longest collective timeout taken (about 11.6 days), so deadlines stay finite
MAX_TIMEOUT = 1_000_000
_PING, _PONG = 7301, 7302


def collective_timeout(timeout=None):
    """The collective timeout in seconds: ``timeout``, else the environment's, else 120; a
    value that is not a number of seconds in (0, :data:`MAX_TIMEOUT`] (0, negative, NaN,
    infinite, empty, not a number) is a one-line :class:`DistributedError` naming it."""
    if timeout is None:
        text = os.environ.get("NEONLITE_COLLECTIVE_TIMEOUT")
        if text is None:
            return DEFAULT_TIMEOUT
        return _seconds(text, f"NEONLITE_COLLECTIVE_TIMEOUT={text!r}")
    return _seconds(timeout, f"the collective timeout {timeout!r}")


def _seconds(value, what):
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = None
    if seconds is None or not 0 < seconds <= MAX_TIMEOUT:
        raise DistributedError(f"{what}: expected a number of seconds in (0, {MAX_TIMEOUT}]")
    return seconds


class Collectives:
    """Allreduce and broadcast of host numpy arrays among the ranks of ``world`` (a
    :class:`~neonlite.distributed.world.World` with more than one rank), each with a timeout.

    ``iallreduce(buf)`` starts an in-place sum and returns its request; ``wait(requests,
    what)`` completes requests (``what`` names the operation in a timeout message);
    ``allreduce(buf, what)``, ``allgather(buf, what)`` and ``broadcast(buf, what)`` start and
    complete one.  Sums of float16 are not
    MPI types: callers stage them as float32.
    """

    def __init__(self, world, timeout=None, grace=None):
        from mpi4py import MPI
        self.MPI, self.world = MPI, world
        self.timeout = collective_timeout(timeout)
        self.grace = float(grace) if grace is not None else min(10.0, self.timeout / 2)
        self.ctrl = world.comm.Dup()
        self._ping = np.zeros(1, dtype=np.int64)
        self._ping_req = self.ctrl.Irecv(self._ping, source=MPI.ANY_SOURCE, tag=_PING)
        self._pongs = []

    # ---- operations --------------------------------------------------------------------------
    def iallreduce(self, buf):
        """Start ``buf[:] = sum over ranks of buf`` (contiguous host array); returns the request."""
        return self.world.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def allreduce(self, buf, what):
        self.wait([self.iallreduce(buf)], what)
        return buf

    def allgather(self, buf, what):
        """Every rank's ``buf`` (a contiguous 1-D host array), in rank order: (size, n)."""
        out = np.empty((self.world.size, buf.size), dtype=buf.dtype)
        self.wait([self.world.comm.Iallgather(buf, out)], what)
        return out

    def broadcast(self, buf, what, root=0):
        """``buf`` of rank ``root`` into ``buf`` on every rank (contiguous host array)."""
        self.wait([self.world.comm.Ibcast(buf, root=root)], what)
        return buf

    def test(self, requests):
        """Drive progress; True when every request is complete."""
        return self.MPI.Request.Testall(requests)

    def wait(self, requests, what):
        """Complete ``requests``, answering pings; abort the job past the timeout."""
        if self.MPI.Request.Testall(requests):
            return
        start = time.monotonic()
        deadline, spin_until = start + self.timeout, start + 0.002
        while not self.MPI.Request.Testall(requests):
            self._answer_pings()
            now = time.monotonic()
            if now > deadline:
                self._fail(what)
            if now > spin_until:
                time.sleep(0.0002)

    # ---- liveness ------------------------------------------------------------------------------
    def _answer_pings(self):
        status = self.MPI.Status()
        while self._ping_req.Test(status):
            source = status.Get_source()
            self._pongs.append(self.ctrl.Isend(np.zeros(1, dtype=np.int64), dest=source,
                                               tag=_PONG))
            self._ping_req = self.ctrl.Irecv(self._ping, source=self.MPI.ANY_SOURCE, tag=_PING)
        self._pongs = [r for r in self._pongs if not r.Test()]

    def _fail(self, what):
        me, size = self.world.rank, self.world.size
        peers = [r for r in range(size) if r != me]
        sends = [self.ctrl.Isend(np.zeros(1, dtype=np.int64), dest=r, tag=_PING) for r in peers]
        answers = {r: np.zeros(1, dtype=np.int64) for r in peers}
        recvs = {r: self.ctrl.Irecv(answers[r], source=r, tag=_PONG) for r in peers}
        end = time.monotonic() + self.grace
        while time.monotonic() < end and not all(req.Test() for req in recvs.values()):
            self._answer_pings()
            time.sleep(0.01)
        silent = [r for r, req in recvs.items() if not req.Test()]
        del sends
        who = (f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} did not "
               f"answer (dead or hung)") if silent else "every rank answered, so one is stuck "\
            "elsewhere (a different collective or a long computation)"
        self.world.abort(f"{what} did not complete within the collective timeout of "
                         f"{self.timeout:g} s: {who}; aborting the job "
                         f"(NEONLITE_COLLECTIVE_TIMEOUT sets the timeout)")
