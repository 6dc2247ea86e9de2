"""Loader workers: processes that make an image data set's batches ahead of training, each
into a slot of one shared-memory block, while the main process trains.

Processes, not threads: a worker that crashes or hangs is detected and stopped without
taking the trainer with it, and decoding never competes with the training loop for the GIL
(``benchmarks/loader_threads.py`` times both; see ``docs/data.md``).  Each worker is a fresh interpreter (``python -c``, the parent's
``sys.path``): no copy-on-write of the trainer's heap, safe under MPI and with threaded BLAS
in the parent, and unlike multiprocessing's ``spawn`` it never re-imports the user's main
script.  It gets the file list as arrays (:class:`~.image_files.ImageFiles`), so its memory
does not grow across epochs.  Tasks and results are pickled over one pair of pipes per
worker; the pixels go through shared memory.

A worker never outlives the run: it ignores SIGINT and SIGTERM (the parent, which handles
them, stops it), it exits when its task pipe closes, the kernel kills it when its parent dies
(``PR_SET_PDEATHSIG``), and :meth:`LoaderPool.close` (called at the end of the run, on every
error, from a finalizer and at interpreter exit) asks it to stop, then kills what is left.  A
worker that dies, or makes no progress for ``timeout`` seconds, ends the run with one
:class:`~.iterator.DataError` line naming it, the file it was reading and what happened.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time
import weakref
from multiprocessing import shared_memory
from multiprocessing.connection import Connection, wait

import numpy as np

from ..backends.cpu.threads import set_cpu_threads, usable_cores
from .iterator import DataError

#: seconds a stopping worker is given before it is killed
STOP_SECONDS = 2.0
#: seconds between the checks of a waited-for batch's workers
POLL_SECONDS = 0.5


class LoaderPool:
    """``nworkers`` worker processes running ``maker`` (a :class:`~.image_batch.BatchMaker`)
    into ``nslots`` slots of shape ``slot_shape`` and dtype ``dtype``.

    ``submit(batch, slot, indices, key)`` hands a batch to the least busy worker;
    ``receive()`` returns a finished one as ``(batch, slot, used, skipped)`` (any order;
    ``used`` None when the batch holds the samples submitted, so results stay small);
    ``slots[slot]`` holds its pixels until that slot is submitted again.  ``pending`` counts
    the batches submitted and not yet received."""

    def __init__(self, maker, nworkers, slot_shape, dtype, nslots, timeout, name):
        self.name, self.timeout, self.maker = name, float(timeout), maker
        self.pending = 0
        slot_bytes = int(np.prod(slot_shape)) * np.dtype(dtype).itemsize
        self.shm = shared_memory.SharedMemory(create=True, size=8 * nworkers +
                                              nslots * slot_bytes)
        self.reading = np.ndarray((nworkers,), np.int64, buffer=self.shm.buf)
        self.reading[:] = -1
        self.slots = np.ndarray((nslots,) + tuple(slot_shape), dtype, buffer=self.shm.buf,
                                offset=8 * nworkers)
        self.workers = []
        self._finalizer = weakref.finalize(self, _shutdown, self.workers, self.shm)
        try:
            for wid in range(nworkers):
                self.workers.append(_Worker.start(wid, (wid, maker, self.shm.name, nworkers,
                                                        self.slots.shape, dtype)))
        except BaseException:
            self.close()
            raise

    @property
    def open(self):
        return self._finalizer.alive

    def submit(self, batch, slot, indices, key):
        worker = min(self.workers, key=lambda w: len(w.batches))
        if not worker.batches:
            worker.since = time.monotonic()
        worker.batches.append(batch)
        self.pending += 1
        try:
            worker.tasks.send((batch, slot, np.asarray(indices, dtype=np.int64), key))
        except OSError:
            self._fail(self._died(worker))

    def receive(self):
        """A finished batch; DataError (the pool closed) when a worker reported an error,
        died, or made no progress for ``timeout`` seconds."""
        while True:
            busy = {w.results: w for w in self.workers if w.batches}
            for conn in wait(list(busy), POLL_SECONDS):
                worker = busy[conn]
                try:
                    batch, slot, used, skipped, error = conn.recv()
                except (EOFError, OSError):
                    self._fail(self._died(worker))
                worker.batches.remove(batch)
                worker.since = time.monotonic()
                self.pending -= 1
                if error is not None:
                    self._fail(error)
                return batch, slot, used, skipped
            now = time.monotonic()
            for worker in busy.values():
                if worker.proc.poll() is not None:
                    self._fail(self._died(worker))
                if now - worker.since > self.timeout:
                    self._fail(f"{self.name}: loader worker {worker.wid} (pid "
                               f"{worker.proc.pid}) made no progress for {self.timeout:g} s"
                               f"{self._reading(worker)} (hung; the option worker_timeout sets "
                               f"this limit); the run stops")

    def drain(self):
        """Receive and drop every pending batch (a generator stopped part-way)."""
        while self.pending:
            self.receive()

    def close(self):
        """Stop every worker (killing those that do not stop) and free the shared memory."""
        self.pending = 0
        self._finalizer()

    def _fail(self, message):
        self.close()
        raise DataError(message)

    def _died(self, worker):
        reading = self._reading(worker)
        try:
            code = worker.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        how = "its pipe closed" if code is None else \
            f"killed by signal {signal.Signals(-code).name}" if code < 0 else \
            f"exit status {code}"
        return (f"{self.name}: loader worker {worker.wid} (pid {worker.proc.pid}) died ({how})"
                f"{reading}; the run stops")

    def _reading(self, worker):
        sample = int(self.reading[worker.wid])
        return f" while reading {self.maker.files.path(sample)}" if sample >= 0 else ""


class _Worker:
    """One worker process: ``proc`` (a Popen), ``tasks`` / ``results`` (its pipes' parent
    ends), ``batches`` (the batches it holds, oldest first), ``since`` (when it last
    finished one, or got its first)."""

    def __init__(self, wid, proc, tasks, results):
        self.wid, self.proc, self.tasks, self.results = wid, proc, tasks, results
        self.batches, self.since = [], time.monotonic()

    @classmethod
    def start(cls, wid, setup):
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        code = (f"import sys; sys.path[:] = {sys.path!r}; "
                f"from neonlite.data.image_workers import worker_main; "
                f"worker_main({task_read}, {result_write}, {os.getpid()})")
        try:
            proc = subprocess.Popen([sys.executable, "-c", code],
                                    pass_fds=(task_read, result_write),
                                    stdin=subprocess.DEVNULL)
        finally:
            os.close(task_read)
            os.close(result_write)
        worker = cls(wid, proc, Connection(task_write, readable=False),
                     Connection(result_read, writable=False))
        worker.tasks.send(setup)
        return worker


def _shutdown(workers, shm):
    for worker in workers:
        try:
            worker.tasks.send(None)
        except OSError:
            pass
        worker.tasks.close()
    deadline = time.monotonic() + STOP_SECONDS
    for worker in workers:
        try:
            worker.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
        worker.results.close()
    try:
        shm.close()
    except BufferError:
        pass
    try:
        shm.unlink()
    except FileNotFoundError:
        pass


def _die_with_parent(parent):
    """Have the kernel kill this process when its parent exits (Linux); exit now if the
    parent is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


def worker_main(task_fd, result_fd, parent):
    """A worker's loop: read its set-up, then ``(batch, slot, indices, key)`` tasks until None
    (or the pipe closes), make each batch into its slot, send ``(batch, slot, used or None, skipped,
    error message or None)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent(parent)
    tasks, results = Connection(task_fd, writable=False), Connection(result_fd, readable=False)
    try:
        wid, maker, shm_name, nworkers, slots_shape, dtype = tasks.recv()
    except EOFError:
        return
    set_cpu_threads(worker_threads(nworkers, usable_cores()))
    shm = _attach(shm_name)
    reading = np.ndarray((nworkers,), np.int64, buffer=shm.buf)
    slots = np.ndarray(slots_shape, dtype, buffer=shm.buf, offset=8 * nworkers)
    maker.on_sample = lambda sample: reading.__setitem__(wid, sample)
    try:
        while True:
            try:
                task = tasks.recv()
            except EOFError:
                break
            if task is None:
                break
            batch, slot, indices, key = task
            used, skipped, error = None, 0, None
            try:
                used, skipped = maker.make(indices, key, slots[slot])
                used = used if skipped else None
            except DataError as err:
                error = str(err)
            except Exception as err:  # any failure reaches the run as one line
                where = f"{maker.files.path(maker.current)}: " if maker.current >= 0 else ""
                error = f"{where}loader worker {wid} failed: {type(err).__name__}: {err}"
            reading[wid] = -1
            results.send((batch, slot, used, skipped, error))
    finally:
        del reading, slots
        shm.close()


def worker_threads(nworkers, cores):
    """The OpenMP threads each of ``nworkers`` workers runs its kernels on: its share of the
    ``cores`` (at least 1), so that the workers together do not start more threads than there
    are cores (each would otherwise start one per core, as DataLoader's workers would without
    their ``torch.set_num_threads(1)``)."""
    return max(1, int(cores) // max(1, int(nworkers)))


def _attach(name):
    """The parent's shared-memory block ``name``, attached without registering it with a
    resource tracker (Python < 3.13 registers every block a process attaches to, which would
    start a tracker process per worker and unlink the parent's block when the worker exits)."""
    from multiprocessing import resource_tracker
    register = resource_tracker.register
    resource_tracker.register = lambda *args: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register
