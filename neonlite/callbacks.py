"""Callbacks run around the training loop: progress bar, periodic evaluation, user hooks."""
import sys
import time

from .transforms.metric import Misclassification


class Callback:
    """Override any hook.  ``model`` is set by :class:`Callbacks`."""

    model = None

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


class ProgressBar(Callback):
    """A tqdm bar per epoch (batches, running cost, samples/s) and a summary line per epoch.
    On output that is not a terminal, it prints the summary lines only."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.bar = None

    def on_train_begin(self, dataset, num_epochs):
        self.nbatches = len(dataset)
        self.num_epochs = num_epochs
        self.bsz = self.model.be.bsz

    def on_epoch_begin(self, epoch):
        self.start, self.running, self.seen = time.perf_counter(), None, 0
        if self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=self.nbatches, desc=f"epoch {epoch + 1}/{self.num_epochs}",
                            unit="batch", file=self.stream, leave=False, dynamic_ncols=True)

    def on_minibatch_end(self, epoch, batch, cost):
        self.running = cost if self.running is None else 0.9 * self.running + 0.1 * cost
        self.seen += self.bsz
        if self.bar is not None:
            rate = self.seen / max(time.perf_counter() - self.start, 1e-9)
            self.bar.set_postfix(cost=f"{self.running:.4f}", samples_s=f"{rate:,.0f}",
                                 refresh=False)
            self.bar.update(1)

    def on_epoch_end(self, epoch):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        seconds = time.perf_counter() - self.start
        extra = getattr(self.model, "last_eval", None)
        evaluated = f", {extra[0]} {extra[1]:.4f}" if extra and extra[2] == epoch else ""
        print(f"epoch {epoch + 1}/{self.num_epochs}: train cost {self.running:.4f}{evaluated}, "
              f"{seconds:.1f} s ({self.seen / seconds:,.0f} samples/s)", file=self.stream,
              flush=True)


class Evaluation(Callback):
    """Evaluate ``metric`` on ``eval_set`` every ``eval_freq`` epochs; the latest value is kept
    as ``model.last_eval = (metric name, value, epoch)`` and in ``history``."""

    def __init__(self, eval_set, metric=None, eval_freq=1):
        self.eval_set, self.eval_freq = eval_set, int(eval_freq)
        self.metric = metric or Misclassification()
        self.history = []

    def on_epoch_end(self, epoch):
        if (epoch + 1) % self.eval_freq == 0:
            value = self.model.eval(self.eval_set, self.metric)
            self.history.append((epoch, value))
            self.model.last_eval = (self.metric.name, value, epoch)


class Callbacks:
    """The callbacks of one training run, in order.

    ``Callbacks(model, eval_set=valid, eval_freq=1, metric=Misclassification(),
    progress=True)`` adds evaluation (before the progress bar, so its summary line shows the
    metric); ``add(callback)`` appends a user callback.  A callback may set
    ``callbacks.stop_training = True`` to end training after the current epoch.
    """

    def __init__(self, model, eval_set=None, eval_freq=1, metric=None, progress=True):
        self.model = model
        self.callbacks = []
        self.stop_training = False
        if eval_set is not None:
            self.add(Evaluation(eval_set, metric, eval_freq))
        if progress:
            self.add(ProgressBar())

    def add(self, callback):
        callback.model = self.model
        callback.callbacks = self
        self.callbacks.append(callback)
        return callback

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def run(*args):
            for cb in self.callbacks:
                cb.model = self.model
                getattr(cb, hook)(*args)
        return run
