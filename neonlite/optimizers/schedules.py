"""Learning-rate schedules: ``rate(base_lr, epoch, step) -> lr`` (step counts from 0, once per
optimizer update)."""
import math

from ..config.errors import short_repr


class Schedule:
    """Constant learning rate."""

    def rate(self, base_lr, epoch, step):
        return base_lr

    def get_description(self):
        return {"type": type(self).__name__, "config": dict(self._config())}

    def _config(self):
        return {}


class StepSchedule(Schedule):
    """Multiply the rate by ``change`` at each epoch listed in ``step_config`` (a list), or
    every ``step_config`` epochs (an int)."""

    def __init__(self, step_config, change):
        every = isinstance(step_config, int) and not isinstance(step_config, bool)
        listed = isinstance(step_config, (list, tuple)) and all(
            isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in step_config)
        if not (every and step_config >= 1 or listed):
            raise ValueError(f"StepSchedule: step_config must be an integer >= 1 (every N "
                             f"epochs) or a list of epoch numbers (integers >= 0), got "
                             f"{short_repr(step_config)}")
        if isinstance(change, bool) or not isinstance(change, (int, float)) or \
                not math.isfinite(change):
            raise ValueError(f"StepSchedule: change must be a finite number, got "
                             f"{short_repr(change)}")
        self.step_config = step_config if every else list(step_config)
        self.change = float(change)

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

    def __init__(self, gamma=1e-4, power=0.75):
        self.gamma, self.power = float(gamma), float(power)

    def rate(self, base_lr, epoch, step):
        return base_lr * (1.0 + self.gamma * step) ** (-self.power)

    def _config(self):
        return {"gamma": self.gamma, "power": self.power}


class CosineSchedule(Schedule):
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to
    ``min_ratio * base_lr`` at ``total_steps`` (held there after)."""

    def __init__(self, total_steps, warmup_steps=0, min_ratio=0.0):
        if total_steps <= warmup_steps:
            raise ValueError(f"CosineSchedule: total_steps ({total_steps}) must exceed "
                             f"warmup_steps ({warmup_steps})")
        self.total_steps, self.warmup_steps = int(total_steps), int(warmup_steps)
        self.min_ratio = float(min_ratio)

    def rate(self, base_lr, epoch, step):
        if step < self.warmup_steps:
            return base_lr * (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return base_lr * (self.min_ratio + (1.0 - self.min_ratio) * cosine)

    def _config(self):
        return {"total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "min_ratio": self.min_ratio}
