"""A background thread that drives MPI's progress engine while gradient allreduces are in
flight, so they advance during the long layer bprops between two of the main thread's tests.

Open MPI (like most MPI libraries) moves a non-blocking collective forward only inside MPI
calls: a ring allreduce of a 6 MB bucket is dozens of rounds, and each round waits for some
thread of the rank to enter the library.  Testing the requests once per layer bprop leaves the
transfer idle through a convolution's bprop.  While :meth:`ProgressThread.busy` holds (from the
first bucket's start to the step's wait), this thread calls ``MPI_Iprobe`` on
``MPI_COMM_SELF`` every ``interval`` seconds: a call that matches nothing (no message is ever
sent there) and runs one pass of the progress engine, which advances every outstanding
request of the process.  The requests themselves stay with the main thread, which alone tests
and waits on them (MPI forbids two threads completing one request).  The thread sleeps
between polls (``time.sleep`` releases the GIL) and blocks on an event while no allreduce is
in flight, so it costs nothing outside that window.

It needs ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by default); :func:`progress_thread_for`
returns None where the library gives less, and the caller falls back to testing between layers.
"""
import atexit
import threading
import time

DEFAULT_INTERVAL = 100e-6


class ProgressThread:
    """Polls MPI's progress engine every ``interval`` seconds between :meth:`busy` and
    :meth:`idle`; a daemon thread, stopped by :meth:`stop` (and at interpreter exit, before
    mpi4py finalizes MPI)."""

    def __init__(self, MPI, interval=DEFAULT_INTERVAL):
        self._probe = MPI.COMM_SELF.Iprobe
        self._any_source, self._any_tag = MPI.ANY_SOURCE, MPI.ANY_TAG
        self.interval = float(interval)
        self.polls = 0
        self._active = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="neonlite-mpi-progress",
                                        daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def busy(self):
        """Start polling (a request was started); idempotent."""
        self._active.set()

    def idle(self):
        """Stop polling until the next :meth:`busy`."""
        self._active.clear()

    def stop(self):
        """End the thread (waits for its last poll); idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._active.set()
        self._thread.join()
        atexit.unregister(self.stop)

    def _run(self):
        while True:
            self._active.wait()
            if self._stopped:
                return
            self._probe(source=self._any_source, tag=self._any_tag)
            self.polls += 1
            time.sleep(self.interval)


def progress_thread_for(MPI, interval=DEFAULT_INTERVAL):
    """A :class:`ProgressThread`, or None where MPI was not initialized with
    ``MPI_THREAD_MULTIPLE`` (another thread may then not enter the library)."""
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        return None
    return ProgressThread(MPI, interval)
