"""Ending a training run cleanly on SIGINT (Ctrl-C) or SIGTERM (what batch schedulers send
before they kill a job).

``neonlite train`` runs ``Model.fit`` inside :class:`StopOnSignal`: the first signal only sets
``signum``; the step under way finishes, ``Model.fit`` calls every callback's
``on_train_interrupted(epoch, batches_done)`` (``ModelCheckpoint`` writes a resumable
checkpoint there) and raises :class:`TrainingInterrupted`, which the command line turns into
one line and exit status 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).  The
handlers are the previous ones again as soon as the first signal arrives, so a second one acts
at once.
"""
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(Exception):
    """Training stopped after a signal: ``signum``, ``epoch`` (from 0), ``batches`` (batches
    of that epoch done) and ``checkpoint`` (the resumable checkpoint written, or None)."""

    def __init__(self, signum, epoch, batches, checkpoint=None):
        self.signum, self.epoch, self.batches, self.checkpoint = signum, epoch, batches, checkpoint
        #: the whole command that resumes the run (``neonlite train`` sets it), else None
        self.resume_command = None
        super().__init__(self.message())

    @property
    def exit_status(self):
        return 128 + int(self.signum)

    def message(self):
        where = f"interrupted at epoch {self.epoch + 1}, batch {self.batches}"
        if self.checkpoint is None:
            return f"{where}; no checkpoint written (with --save-path an interrupted run " \
                   f"can be resumed)"
        if self.resume_command is not None:
            return f"{where}; resume with: {self.resume_command}"
        return f"{where}; resume with --resume {self.checkpoint}"


class StopOnSignal:
    """Context manager: while inside, SIGINT and SIGTERM set ``signum`` instead of ending the
    process (outside the main thread, where handlers cannot be set, it does nothing)."""

    def __init__(self, signals=SIGNALS):
        self.signals = tuple(signals)
        self.signum = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.signum = signum
        self._restore()

    def _restore(self):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def __exit__(self, *exc):
        self._restore()
        return False
