"""``neonlite.profile(path, steps=(5, 15))``: record chosen training steps of every
``Model.fit`` run inside the ``with`` block.

While the block is open, ``Model.fit`` is replaced (on the class, restored on exit) by a
version that times the data iterator, counts steps and, for steps ``A`` to ``B - 1``
(counted from 0 over all the fits in the block), puts the timing wrappers of
:mod:`.instrument` on the model's instances; they come off after step ``B - 1``, so the
other steps run the plain code.  After the fit the trace is written (under MPI: one file per
rank and a merged one on rank 0) and :meth:`Profile.table` gives the per-layer table.
"""
import inspect
import math
import time

from ..config.errors import ConfigError
from ..data.position import epoch_batches
from ..model import Model
from .clock import clock_for
from .instrument import Instrumentation
from .memory import backend_workspace_bytes, model_memory
from .peak import machine_peak
from .recorder import Recorder, Span
from .report import build_rows, format_table
from .trace import check_writable, write_rank_traces

DEFAULT_STEPS = (5, 15)


def parse_steps(value, what="steps"):
    """``(A, B)`` from ``"A:B"``, a pair or a ``range``: profile steps A .. B - 1."""
    try:
        if isinstance(value, str):
            first, last = value.split(":")
            value = (int(first), int(last))
        elif isinstance(value, range):
            value = (value.start, value.stop)
        first, last = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} {value!r}: expected A:B, two step numbers with 0 <= A < B "
                          f"(steps A to B-1 are profiled)") from None
    if not 0 <= first < last:
        raise ConfigError(f"{what} {first}:{last}: expected 0 <= A < B (steps A to B-1 are "
                          f"profiled)")
    return first, last


class Profile:
    """The context manager :func:`neonlite.profile` returns (see the module docstring).

    ``path``: the Chrome trace to write (None: no file, only the table); its folder is checked
    now, so a bad path fails before any training.  ``steps``: ``(A, B)`` or ``"A:B"``.
    ``what``/``path_what``: how messages name the steps and the path (the CLI says
    ``--profile-steps`` and ``--profile``)."""

    def __init__(self, path=None, steps=DEFAULT_STEPS, what="steps", path_what="trace path"):
        self.path = path
        self.what = what
        self.first, self.last = parse_steps(steps, what)
        if path is not None:
            problem = check_writable(path, path_what)
            if problem:
                raise ConfigError(problem)
        self.recorder = None
        self.model = None
        self.optimizer = None
        self.written = []
        self.step = 0
        self.checkpoints = []
        self._fit = None

    # ---- the with block ------------------------------------------------------------------------
    def __enter__(self):
        self._fit = Model.__dict__["fit"]
        profile = self

        def fit(model, *args, **kwargs):
            return profile._profiled_fit(model, args, kwargs)
        fit.__doc__ = self._fit.__doc__
        Model.fit = fit
        return self

    def __exit__(self, *exc):
        Model.fit = self._fit
        return False

    # ---- one fit ------------------------------------------------------------------------------
    def _check_window(self, model, dataset, num_epochs):
        batches = len(dataset) if hasattr(dataset, "__len__") else None
        if batches is None:
            return
        total = self.step + max(0, num_epochs - model.epoch_index) * batches
        if self.last > total:
            epochs = max(0, num_epochs - model.epoch_index)
            raise ConfigError(f"{self.what} {self.first}:{self.last}: outside the run, which "
                              f"has {total} training steps ({epochs} epoch(s) x {batches} "
                              f"batches); choose A:B with B <= {total}")

    def _profiled_fit(self, model, args, kwargs):
        given = inspect.signature(self._fit).bind(model, *args, **kwargs)
        given.apply_defaults()
        dataset, optimizer = given.arguments["dataset"], given.arguments["optimizer"]
        self._check_window(model, dataset, given.arguments["num_epochs"])
        world = getattr(model.grad_sync, "world", None)
        if world is not None and world.size > 1:
            world.comm.Barrier()
        self.origin = time.perf_counter()
        self.model, self.optimizer, self.world = model, optimizer, world
        timed = TimedBatches(dataset, self)
        inner_step = model.train_step
        wrappers = Instrumentation(None)
        profile = self

        def train_step(*args, **kwargs):
            if profile.step == profile.first and profile.recorder is None:
                profile._open(model, optimizer, wrappers)
            rec = profile.recorder
            span = rec.open(f"step {profile.step}", "step") if rec and rec.attached else None
            try:
                return inner_step(*args, **kwargs)
            finally:
                if span is not None:
                    rec.close(span)
                profile._after_step(wrappers)
        model.__dict__["train_step"] = train_step
        model.__dict__["save"] = self._timed_save(model.save)
        try:
            given.arguments["dataset"] = timed
            return self._fit(*given.args, **given.kwargs)
        finally:
            del model.__dict__["train_step"], model.__dict__["save"]
            if self.recorder is not None and self.recorder.attached:
                self._close(wrappers)
            self._finish(world)

    def _timed_save(self, inner):
        """``model.save`` timed over the whole fit (checkpoints are written at epoch ends,
        usually outside the window): host-clock ``checkpoint`` spans for the trace."""
        def save(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.checkpoints.append(Span("checkpoint", "checkpoint", 0, begin,
                                             time.perf_counter(), args={"path": str(args[0])}))
        return save

    def _open(self, model, optimizer, wrappers):
        self.recorder = Recorder(clock_for(model.be))
        wrappers.recorder = self.recorder
        wrappers.attach(model, optimizer)
        self._step_mark = self.recorder.clock.stamp()

    def _after_step(self, wrappers):
        """Close the step that just ended; open the window at the end of step A - 1, so the
        wait for step A's batch is inside it (step 0's, when A = 0, is not)."""
        rec = self.recorder
        if rec is not None and rec.attached:
            now = rec.clock.stamp()
            rec.mark_step(self._step_mark, now)
            self._step_mark = now
            if self.step == self.last - 1:
                self._close(wrappers)
        self.step += 1
        if self.step == self.first and rec is None:
            self._open(self.model, self.optimizer, wrappers)

    def _close(self, wrappers):
        wrappers.detach()
        self.recorder.attached = False
        self.recorder.resolve()

    def _finish(self, world):
        if self.recorder is None or self.path is None or self.written:
            return
        metadata = {"steps": [self.first, self.last], "clock": self.recorder.clock.kind,
                    "backend": getattr(self.model.be, "name", "?")}
        self.written = write_rank_traces(self.path, self.recorder.spans + self.checkpoints,
                                         self.origin, world, metadata)

    # ---- results ------------------------------------------------------------------------------
    def rows(self):
        """The table as plain data (see :func:`.report.build_rows`)."""
        if self.recorder is None or not self.recorder.steps:
            raise RuntimeError("profile: no step was recorded (did model.fit run steps "
                               f"{self.first} to {self.last - 1} inside the with block?)")
        peak, self.peak_note = machine_peak(getattr(self.model.be, "name", "cpu"))
        return build_rows(self.recorder, self.model, model_memory(self.model), peak,
                          backend_workspace_bytes(self.model.be))

    def table(self):
        """The per-layer table as text."""
        report = self.rows()
        return format_table(report, self.peak_note)


class TimedBatches:
    """A data iterator whose waits for a batch are ``data`` spans while a window is open,
    whether ``fit`` iterates it whole or resumes an epoch part-way (``batches_from``);
    everything else (``len``, ``shape``, ``batches``...) is the wrapped iterator's."""

    def __init__(self, data, profile):
        self.data, self.profile = data, profile

    def __len__(self):
        return len(self.data)

    def __iter__(self):
        return self._timed(iter(self.data))

    def batches_from(self, skip):
        """The wrapped iterator's epoch from batch ``skip`` (:mod:`neonlite.data.position`),
        its waits timed."""
        return self._timed(xt for _, xt in epoch_batches(self.data, skip))

    def _timed(self, batches):
        while True:
            rec = self.profile.recorder
            span = rec.open("data", "data") if rec is not None and rec.attached else None
            try:
                batch = next(batches)
            except StopIteration:
                if span is not None:
                    rec.close(span)
                    rec.spans.remove(span)
                return
            if span is not None:
                rec.close(span)
            yield batch

    def __getattr__(self, name):
        return getattr(self.data, name)


def profile(path=None, steps=DEFAULT_STEPS):
    """``with neonlite.profile("trace.json", steps=(5, 15)) as prof: model.fit(...)``, then
    ``print(prof.table())``: see :class:`Profile`."""
    return Profile(path, steps)


def steps_for_epochs(last, batches):
    """The number of epochs of ``batches`` steps a run needs to reach step ``last``."""
    return max(1, math.ceil(last / max(1, batches)))
