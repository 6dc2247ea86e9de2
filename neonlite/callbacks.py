"""Callbacks run around the training loop: progress output, periodic evaluation, checkpoints
(every N epochs and keep-best), early stopping, a divergence guard, a learning-rate
schedule, a plain loss log and user hooks.

Hooks, in the order ``Model.fit`` calls them: ``on_train_begin(dataset, num_epochs)``,
``on_epoch_begin(epoch)``, ``on_minibatch_end(epoch, batch, cost)``, ``on_epoch_end(epoch)``,
``on_train_end()``; instead of the rest, ``on_train_interrupted(epoch, batches_done)`` when a
signal stopped the run (:mod:`neonlite.interrupts`).  Epochs count from 0 (messages show them
from 1).
"""
import sys
import time

from .config.values import describe_value, given_arguments
from .output_paths import check_outputs
from .transforms.metric import Misclassification
from .optimizers.schedules import run_length
from .kernels.build import compile_seconds


class Callback:
    """Override any hook.  ``model`` and ``callbacks`` (the :class:`Callbacks` it belongs to)
    are set when it is added.  Like layers, a callback records its constructor arguments, so
    those that take plain values can be named in a YAML ``callbacks:`` list
    (``describable = False`` marks the ones that cannot)."""

    model = None
    callbacks = None

    def __new__(cls, *args, **kwargs):
        callback = super().__new__(cls)
        callback._given_args = given_arguments(cls, args, kwargs)
        return callback

    def on_train_begin(self, dataset, num_epochs):
        pass

    def on_epoch_begin(self, epoch):
        pass

    def on_minibatch_end(self, epoch, batch, cost):
        pass

    def on_epoch_end(self, epoch):
        pass

    def on_train_end(self):
        pass

    def on_train_interrupted(self, epoch, batches):
        pass

    def output_paths(self):
        """``[(what, path)]`` of the files this callback writes, checked together before the
        first step (:func:`neonlite.output_paths.check_outputs`)."""
        return []

    def get_description(self):
        return {"type": type(self).__name__,
                "config": describe_value(self._given_args or {}, type(self).__name__)}

    def _say(self, message):
        """Print a one-line message unless the run is quiet."""
        if self.callbacks is None or not self.callbacks.quiet:
            print(message, file=sys.stderr, flush=True)


def _format_seconds(seconds):
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressBar(Callback):
    """Progress of each epoch on ``stream`` (stderr by default).

    On a terminal: a tqdm bar per epoch (batches, running cost, samples/s, ETA), redrawn at most
    every ``refresh`` seconds.  Elsewhere (a pipe, a CI log): a plain line every ``interval``
    seconds instead of bar redraws.  Always: a summary line per epoch: the mean training cost
    of the epoch's batches (what the training log and ``neonlite plot`` call the epoch mean;
    the bar shows a running average), the validation metric when it was evaluated after the
    epoch, seconds, and samples/s (time spent compiling kernels left out), and the corrupt
    images the data set skipped that epoch (an image folder's ``skip_corrupt``), if any.
    """

    describable = False

    def __init__(self, stream=None, interval=30.0, refresh=0.1):
        self.stream = stream or sys.stderr
        self.interval, self.refresh = float(interval), float(refresh)
        self.bar = None

    def on_train_begin(self, dataset, num_epochs):
        self.nbatches = len(dataset) if hasattr(dataset, "__len__") else None
        self.dataset, self.num_epochs = dataset, num_epochs
        self.bsz = self.model.be.bsz

    def on_epoch_begin(self, epoch):
        self.start, self.running, self.seen = time.perf_counter(), None, 0
        self.total, self.batches = 0.0, 0
        self.last_line = self.start
        self.compiled_before = _compile_seconds()
        if self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=self.nbatches, desc=f"epoch {epoch + 1}/{self.num_epochs}",
                            unit="batch", file=self.stream, leave=False, dynamic_ncols=True,
                            mininterval=self.refresh)

    def on_minibatch_end(self, epoch, batch, cost):
        self.running = cost if self.running is None else 0.9 * self.running + 0.1 * cost
        self.total, self.batches = self.total + float(cost), self.batches + 1
        self.seen += self.bsz
        now = time.perf_counter()
        rate = self.seen / max(now - self.start - self._compiling(), 1e-9)
        if self.bar is not None:
            self.bar.set_postfix(cost=f"{self.running:.4f}", samples_s=f"{rate:,.0f}",
                                 refresh=False)
            self.bar.update(1)
        elif now - self.last_line >= self.interval:
            self.last_line = now
            of = f"/{self.nbatches}" if self.nbatches else ""
            left = ((self.nbatches - batch - 1) * self.bsz / rate) if self.nbatches else None
            print(f"epoch {epoch + 1}/{self.num_epochs}: batch {batch + 1}{of}, running cost "
                  f"{self.running:.4f}, {rate:,.0f} samples/s"
                  + (f", ETA {_format_seconds(left)}" if left is not None else ""),
                  file=self.stream, flush=True)

    def on_train_interrupted(self, epoch, batches):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_epoch_end(self, epoch):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        seconds = time.perf_counter() - self.start
        compiling = self._compiling()
        extra = getattr(self.model, "last_eval", None)
        evaluated = f", valid {extra[0]} {extra[1]:.4f}" if extra and extra[2] == epoch else ""
        cost = f"{self.total / self.batches:.4f}" if self.batches else "n/a"
        skipped = getattr(self.dataset, "skipped", 0)
        evaluated += f", {skipped} corrupt image{'' if skipped == 1 else 's'} skipped" \
            if skipped else ""
        print(f"epoch {epoch + 1}/{self.num_epochs}: mean train cost {cost}{evaluated}, "
              f"{seconds:.1f} s ({self.seen / max(seconds - compiling, 1e-9):,.0f} samples/s"
              + (f"; {compiling:.1f} s of it compiling kernels" if compiling >= 0.05 else "")
              + ")", file=self.stream, flush=True)

    def _compiling(self):
        """Seconds spent compiling kernels since the epoch began (not counted in samples/s)."""
        return _compile_seconds() - self.compiled_before


def _compile_seconds():
    return compile_seconds()


class Evaluation(Callback):
    """Evaluate ``metric`` on ``eval_set`` every ``eval_freq`` epochs (and after the last
    epoch); the latest value is kept as ``model.last_eval = (metric name, value, epoch)`` and
    in ``history``."""

    describable = False

    def __init__(self, eval_set, metric=None, eval_freq=1):
        self.eval_set, self.eval_freq = eval_set, int(eval_freq)
        self.configured = metric is not None
        self.metric = metric or Misclassification()
        self.history = []

    def on_train_begin(self, dataset, num_epochs):
        """Check the validation set's example and target shapes and the metric against the
        model now, so a wrong one fails before the first epoch, not after it."""
        self.num_epochs = num_epochs
        self.model.initialize(self.eval_set, getattr(self.model, "cost", None))
        self.metric.check(self.model.out_shape)
        if self.configured and getattr(self.model, "metric", None) is None:
            self.model.metric = self.metric

    def on_epoch_end(self, epoch):
        if self.eval_freq and ((epoch + 1) % self.eval_freq == 0 or epoch + 1 == self.num_epochs):
            value = self.model.eval(self.eval_set, self.metric)
            self.history.append((epoch, value))
            self.model.last_eval = (self.metric.name, value, epoch)


def _higher_is_better(metric_name, mode):
    if mode == "auto":
        return "accuracy" in metric_name
    return mode == "max"


class _Monitor:
    """Tracks the best value of the validation metric (``model.last_eval``)."""

    def __init__(self, mode, min_delta):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
        self.mode, self.min_delta = mode, float(min_delta)
        self.best = None
        self.best_epoch = None

    def fresh_value(self, model, epoch):
        """(name, value) when the metric was evaluated at ``epoch``, else None."""
        last = getattr(model, "last_eval", None)
        return (last[0], last[1]) if last and last[2] == epoch else None

    def improved(self, name, value, epoch):
        higher = _higher_is_better(name, self.mode)
        better = self.best is None or (value > self.best + self.min_delta if higher
                                       else value < self.best - self.min_delta)
        if better:
            self.best, self.best_epoch = value, epoch
        return better


class ModelCheckpoint(Callback):
    """Save a checkpoint to ``save_path`` every ``every`` epochs (0: only at the end) and after
    the last epoch; with ``keep_best``, also save to ``<save_path stem>.best.h5`` whenever the
    validation metric improves (lower is better, higher for accuracy; ``mode`` forces 'min' or
    'max').  The checkpoint holds the run's description (``callbacks.run_config`` when the run
    has one, else the model's own)."""

    def __init__(self, save_path, every=1, keep_best=False, mode="auto"):
        if not isinstance(every, int) or every < 0:
            raise ValueError(f"ModelCheckpoint: every must be an integer >= 0, got {every!r}")
        self.save_path, self.every, self.keep_best = str(save_path), every, bool(keep_best)
        self.monitor = _Monitor(mode, 0.0)
        self.saved_epoch = None

    @property
    def best_path(self):
        stem = self.save_path[:-3] if self.save_path.endswith(".h5") else self.save_path
        return f"{stem}.best.h5"

    def output_paths(self):
        return [("ModelCheckpoint save_path", self.save_path)] + \
            ([("ModelCheckpoint keep_best", self.best_path)] if self.keep_best else [])

    def _save(self, path):
        config = getattr(self.callbacks, "run_config", None)
        self.model.save(path, config=config)

    def on_epoch_end(self, epoch):
        if self.every and (epoch + 1) % self.every == 0:
            self._save(self.save_path)
            self.saved_epoch = epoch
        fresh = self.monitor.fresh_value(self.model, epoch)
        if self.keep_best and fresh is not None and self.monitor.improved(*fresh, epoch):
            self._save(self.best_path)

    def on_train_interrupted(self, epoch, batches):
        """A resumable checkpoint of the run stopped after ``batches`` batches of ``epoch``."""
        self._save(self.save_path)
        self.callbacks.interrupted_checkpoint = self.save_path

    def on_train_end(self):
        if self.model.epoch_index and self.saved_epoch != self.model.epoch_index - 1:
            self._save(self.save_path)
            self.saved_epoch = self.model.epoch_index - 1


class EarlyStopping(Callback):
    """Stop training when the validation metric has not improved by more than ``min_delta``
    for ``patience`` evaluations in a row (lower is better, higher for accuracy; ``mode``
    forces 'min' or 'max').  ``stopped_epoch`` tells where it stopped (None if it did not)."""

    def __init__(self, patience=3, min_delta=0.0, mode="auto"):
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(f"EarlyStopping: patience must be a positive integer, got "
                             f"{patience!r}")
        self.patience = patience
        self.monitor = _Monitor(mode, min_delta)
        self.waited = 0
        self.stopped_epoch = None

    def on_epoch_end(self, epoch):
        fresh = self.monitor.fresh_value(self.model, epoch)
        if fresh is None:
            return
        if self.monitor.improved(*fresh, epoch):
            self.waited = 0
            return
        self.waited += 1
        if self.waited >= self.patience:
            self.stopped_epoch = epoch
            self.callbacks.stop_training = True
            self._say(f"early stopping after epoch {epoch + 1}: {fresh[0]} has not improved on "
                      f"{self.monitor.best:.4f} (epoch {self.monitor.best_epoch + 1}) for "
                      f"{self.patience} evaluations")


class ResetState(Callback):
    """Returns every stateful recurrent layer to its initial state at the start of each epoch
    (truncated backpropagation through time carries the state between the minibatches of an
    epoch, not from one epoch's end into the next one's start).  An epoch resumed from a
    checkpoint written inside it (``model.batch_index`` > 0 when training begins) keeps the
    state the checkpoint restored."""

    resumed_epoch = None

    def on_train_begin(self, dataset, num_epochs):
        self.resumed_epoch = self.model.epoch_index if getattr(self.model, "batch_index", 0) \
            else None

    def on_epoch_begin(self, epoch):
        if epoch == self.resumed_epoch:
            self.resumed_epoch = None
            return
        for leaf in self.model.layers.leaves():
            if getattr(leaf, "stateful", False):
                leaf.reset_state()


class LearningRateSchedule(Callback):
    """Set each optimizer's learning rate at the start of every epoch from ``schedule``
    (``neonlite.optimizers`` schedules: ``rate(base_lr, epoch, step)``), where base_lr is the
    optimizer's own rate; it is put back at the end of the epoch, so descriptions and
    checkpoints keep the base rate and a resumed run gets the same rates."""

    def __init__(self, schedule):
        if not hasattr(schedule, "rate"):
            raise ValueError(f"LearningRateSchedule: schedule must be a schedule "
                             f"(StepSchedule, PowerSchedule, CosineSchedule, ...), got "
                             f"{schedule!r}")
        self.schedule = schedule
        self.base = {}

    def on_train_begin(self, dataset, num_epochs):
        try:
            batches = len(dataset)
        except TypeError:
            return
        getattr(self.schedule, "plan", lambda steps, how: None)(
            batches * num_epochs, run_length(batches, num_epochs))

    def _optimizers(self):
        opt = self.model.optimizer
        mapping = getattr(opt, "mapping", None)
        return list({id(o): o for o in mapping.values()}.values()) if mapping else [opt]

    def on_epoch_begin(self, epoch):
        for opt in self._optimizers():
            base = self.base.setdefault(id(opt), opt.learning_rate)
            opt.learning_rate = self.schedule.rate(base, epoch, opt.step)

    def on_epoch_end(self, epoch):
        for opt in self._optimizers():
            if id(opt) in self.base:
                opt.learning_rate = self.base[id(opt)]


class FunctionCallback(Callback):
    """A user hook from plain functions: ``FunctionCallback(on_epoch_end=lambda epoch: ...)``
    (any of the hook names; each function gets the hook's arguments)."""

    describable = False
    HOOKS = ("on_train_begin", "on_epoch_begin", "on_minibatch_end", "on_epoch_end",
             "on_train_end", "on_train_interrupted")

    def __init__(self, **hooks):
        unknown = [name for name in hooks if name not in self.HOOKS]
        if unknown:
            raise TypeError(f"FunctionCallback: unknown hook {unknown[0]!r}; hooks are "
                            f"{', '.join(self.HOOKS)}")
        for name, fn in hooks.items():
            setattr(self, name, fn)


class LossLog(Callback):
    """Keeps every step's training cost in ``losses`` and prints the mean of each ``every``
    steps, with the seconds since it was made, to ``stream``: a plain log where a progress bar
    does not fit (a script's output, a notebook)."""

    describable = False

    def __init__(self, every=50, stream=None, unit="nats/char"):
        if every < 1:
            raise ValueError(f"LossLog: every must be >= 1, got {every!r}")
        self.every, self.stream, self.unit, self.losses = every, stream, unit, []
        self.start = time.perf_counter()

    def on_minibatch_end(self, epoch, batch, cost):
        self.losses.append(cost)
        if len(self.losses) % self.every == 0:
            recent = sum(self.losses[-self.every:]) / self.every
            print(f"step {len(self.losses):5d}  train loss {recent:.4f} {self.unit}  "
                  f"{time.perf_counter() - self.start:7.1f} s", file=self.stream or sys.stdout,
                  flush=True)


class DivergenceGuard(Callback):
    """Stop training with a ``FloatingPointError`` when the cost grows without bound, before a
    checkpoint of the diverged weights can be written.

    The guard follows a running mean of the batch cost (``smoothing``: weight of the old
    mean) and its lowest value since training began.  After ``warmup`` batches, the run is
    stopped when the running mean exceeds ``growth`` times max(lowest, ``floor``), or when a
    batch cost exceeds ``max_cost`` (None: no absolute bound).  ``growth=None`` turns the
    relative test off.  ``neonlite train`` adds ``DivergenceGuard()`` unless the YAML
    ``callbacks:`` list names one (``{type: DivergenceGuard, config: {growth: 1.0e3}}``)."""

    def __init__(self, growth=1.0e6, max_cost=None, warmup=10, smoothing=0.9, floor=1.0):
        for name, value in (("growth", growth), ("max_cost", max_cost)):
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not value > 0):
                raise ValueError(f"DivergenceGuard: {name} must be a number > 0 or null, got "
                                 f"{value!r}")
        if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
            raise ValueError(f"DivergenceGuard: warmup must be an integer >= 0, got {warmup!r}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"DivergenceGuard: smoothing must be in [0, 1), got {smoothing!r}")
        if not floor > 0:
            raise ValueError(f"DivergenceGuard: floor must be > 0, got {floor!r}")
        self.growth, self.max_cost, self.warmup = growth, max_cost, warmup
        self.smoothing, self.floor = float(smoothing), float(floor)
        self.mean, self.lowest, self.seen = None, None, 0

    def on_minibatch_end(self, epoch, batch, cost):
        where = f"at epoch {epoch + 1}, batch {batch + 1}"
        if self.max_cost is not None and cost > self.max_cost:
            raise FloatingPointError(f"the training diverged {where}: the cost {cost:.4g} "
                                     f"exceeds DivergenceGuard max_cost {self.max_cost:g}; "
                                     f"lower the learning rate")
        self.seen += 1
        self.mean = cost if self.mean is None else \
            self.smoothing * self.mean + (1 - self.smoothing) * cost
        self.lowest = self.mean if self.lowest is None else min(self.lowest, self.mean)
        limit = None if self.growth is None else self.growth * max(self.lowest, self.floor)
        if self.seen > self.warmup and limit is not None and self.mean > limit:
            raise FloatingPointError(f"the training diverged {where}: the running cost "
                                     f"{self.mean:.4g} grew past {self.growth:g} times its "
                                     f"lowest {self.lowest:.4g} (DivergenceGuard growth); "
                                     f"lower the learning rate")


class Callbacks:
    """The callbacks of one training run, in order.

    ``Callbacks(model, eval_set=valid, eval_freq=1, metric=Misclassification(),
    progress=True)`` adds a :class:`DivergenceGuard` (``divergence_guard=False``: none) and
    evaluation (before the progress bar, so its summary line shows the metric);
    ``add(callback)`` appends a user callback (another DivergenceGuard replaces the
    default).  A callback may set ``callbacks.stop_training = True`` to end training after
    the current epoch.  ``quiet`` silences the callbacks' messages; ``run_config`` is the run
    description checkpoints store.
    """

    def __init__(self, model, eval_set=None, eval_freq=1, metric=None, progress=True,
                 quiet=False, run_config=None, divergence_guard=True):
        self.model = model
        self.callbacks = []
        self.stop_training = False
        self.quiet = quiet
        self.run_config = run_config
        if divergence_guard:
            self.add(DivergenceGuard())
        if eval_set is not None:
            self.add(Evaluation(eval_set, metric, eval_freq))
        if progress:
            self.add(ProgressBar())

    def add(self, callback):
        if isinstance(callback, DivergenceGuard):
            self.callbacks = [cb for cb in self.callbacks if not isinstance(cb, DivergenceGuard)]
        callback.model = self.model
        callback.callbacks = self
        self.callbacks.append(callback)
        return callback

    def on_train_begin(self, dataset, num_epochs):
        """Check every callback's output paths together (a folder, device, FIFO or symlink
        there, an unwritable folder, two callbacks writing one file: one line, before the
        first step), then run each callback's hook."""
        check_outputs([pair for cb in self.callbacks for pair in cb.output_paths()])
        for cb in self.callbacks:
            cb.model = self.model
            cb.on_train_begin(dataset, num_epochs)

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def run(*args):
            for cb in self.callbacks:
                cb.model = self.model
                getattr(cb, hook)(*args)
        return run
