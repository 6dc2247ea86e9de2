"""Learning-rate schedules: ``rate(base_lr, epoch, step) -> lr`` (step counts from 0, once per
optimizer update)."""
import math
import warnings

from ..config.errors import ConfigError
from .options import NON_NEGATIVE, POSITIVE, Range, check_options, option_error


class Schedule:
    """Constant learning rate.  A subclass lists its options' ranges in ``OPTIONS`` (see
    :mod:`.options`)."""

    OPTIONS = {}

    def rate(self, base_lr, epoch, step):
        return base_lr

    def plan(self, steps, how):
        """The run will take ``steps`` optimizer steps (``how`` says so in words); a schedule
        that needs the run's length takes it here."""

    def get_description(self):
        return {"type": type(self).__name__, "config": dict(self._config())}

    def _config(self):
        return {}


class _EpochList:
    """``step_config``: an integer >= 1 (every N epochs) or a list of epoch numbers (integers
    >= 0)."""

    def describe(self):
        return "an integer >= 1 (every N epochs) or a list of epoch numbers (integers >= 0)"

    def accepts(self, value):
        count = Range(0, integer=True)
        if isinstance(value, (list, tuple)):
            return all(count.accepts(e) for e in value)
        return Range(1, integer=True).accepts(value)

    def normal(self, value):
        return [int(e) for e in value] if isinstance(value, (list, tuple)) else int(value)


class StepSchedule(Schedule):
    """Multiply the rate by ``change`` at each epoch listed in ``step_config`` (a list), or
    every ``step_config`` epochs (an int)."""

    OPTIONS = {"step_config": _EpochList(), "change": POSITIVE}

    def __init__(self, step_config, change):
        checked = check_options(self, step_config=step_config, change=change)
        self.step_config, self.change = checked["step_config"], checked["change"]

    def rate(self, base_lr, epoch, step):
        if isinstance(self.step_config, int):
            n = epoch // self.step_config
        else:
            n = sum(1 for e in self.step_config if epoch >= e)
        return base_lr * self.change ** n

    def _config(self):
        return {"step_config": self.step_config, "change": self.change}


class PowerSchedule(Schedule):
    """lr = base_lr * (1 + gamma * step) ** -power (inverse-power decay per step)."""

    OPTIONS = {"gamma": NON_NEGATIVE, "power": NON_NEGATIVE}

    def __init__(self, gamma=1e-4, power=0.75):
        checked = check_options(self, gamma=gamma, power=power)
        self.gamma, self.power = checked["gamma"], checked["power"]

    def rate(self, base_lr, epoch, step):
        return base_lr * (1.0 + self.gamma * step) ** (-self.power)

    def _config(self):
        return {"gamma": self.gamma, "power": self.power}


class CosineSchedule(Schedule):
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to
    ``min_ratio * base_lr`` at ``total_steps`` (held there after).

    ``total_steps`` None (the default): the run's own number of steps, batches per epoch x
    epochs, set when ``Model.fit`` starts (:meth:`plan`); a given number that differs from
    the run's is kept, with a warning."""

    OPTIONS = {"total_steps": Range(1, integer=True, optional=True),
               "warmup_steps": Range(0, integer=True), "min_ratio": Range(0, 1)}

    def __init__(self, total_steps=None, warmup_steps=0, min_ratio=0.0):
        checked = check_options(self, total_steps=total_steps, warmup_steps=warmup_steps,
                                min_ratio=min_ratio)
        if checked["total_steps"] is not None and \
                checked["total_steps"] <= checked["warmup_steps"]:
            raise option_error(self, "total_steps", total_steps,
                               f"> warmup_steps ({checked['warmup_steps']})")
        self.given_steps = checked["total_steps"]
        self.total_steps, self.warmup_steps = self.given_steps, checked["warmup_steps"]
        self.min_ratio = checked["min_ratio"]

    def plan(self, steps, how):
        """The run will take ``steps`` optimizer steps (``how``: "B batches x E epochs")."""
        if self.given_steps is None:
            if steps <= self.warmup_steps:
                warnings.warn(f"CosineSchedule: the run's {steps} step{'' if steps == 1 else 's'}"
                              f" ({how}) end{'s' if steps == 1 else ''} within "
                              f"its {self.warmup_steps} warm-up steps: the rate only warms up",
                              UserWarning, stacklevel=3)
            self.total_steps = max(steps, self.warmup_steps + 1)
        elif self.given_steps != steps:
            warnings.warn(f"CosineSchedule: total_steps {self.given_steps} differs from the "
                          f"run's {steps} steps ({how}), so the decay "
                          + ("ends early and the rate stays at its floor" if
                             self.given_steps < steps else "stops short of its floor")
                          + "; leave total_steps out to derive it", UserWarning, stacklevel=3)

    def rate(self, base_lr, epoch, step):
        if step < self.warmup_steps:
            return base_lr * (step + 1) / self.warmup_steps
        if self.total_steps is None:
            raise ConfigError("CosineSchedule: total_steps is unknown before Model.fit plans "
                              "the run; give total_steps to use the schedule outside fit")
        progress = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return base_lr * (self.min_ratio + (1.0 - self.min_ratio) * cosine)

    def _config(self):
        return {"total_steps": self.given_steps, "warmup_steps": self.warmup_steps,
                "min_ratio": self.min_ratio}


def schedules_of(optimizer):
    """The schedules of ``optimizer``: its own, a wrapped optimizer's (``MixedPrecision``),
    each entry's of a ``MultiOptimizer``."""
    found = []
    for entry in getattr(optimizer, "mapping", {}).values():
        found += schedules_of(entry)
    inner = getattr(optimizer, "optimizer", None)
    if inner is not None and inner is not optimizer:
        found += schedules_of(inner)
    schedule = getattr(optimizer, "schedule", None)
    if schedule is not None and all(schedule is not s for s in found):
        found.append(schedule)
    return found


def plan_schedules(optimizer, batches, epochs):
    """Tell every schedule of ``optimizer`` that the run takes ``batches`` x ``epochs``
    steps (``Model.fit`` calls it before the first step)."""
    for schedule in schedules_of(optimizer):
        schedule.plan(batches * epochs, run_length(batches, epochs))


def plan_schedules_for(optimizer, dataset, epochs):
    """:func:`plan_schedules` with ``dataset``'s number of batches per epoch, when it knows
    it (``len(dataset)``); nothing otherwise."""
    try:
        batches = len(dataset)
    except TypeError:
        return
    plan_schedules(optimizer, batches, epochs)


def run_length(batches, epochs):
    """``"B batches x E epochs"``, as the schedules' messages say it."""
    return f"{batches} batch{'' if batches == 1 else 'es'} x {epochs} " \
           f"epoch{'' if epochs == 1 else 's'}"
