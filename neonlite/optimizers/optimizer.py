"""The optimizer base: schedules, gradient clipping and per-parameter state.

Every update rule is written once with op-trees (``param.value[:] = ...``), so it runs fused on
each backend.  Optimizer state lives on the parameters (``param.states``) and is saved with
checkpoints; ``step`` counts updates.
"""
import math

import numpy as np

from ..config.errors import short_repr
from .schedules import Schedule


class Optimizer:
    """Base class.  Subclasses implement ``update(be, param, grad, lr)``, where ``grad`` is an
    op-tree of the (clipped) gradient."""

    def __init__(self, learning_rate, schedule=None, gradient_clip_norm=None,
                 gradient_clip_value=None, name=None):
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or \
                not 0 < learning_rate < math.inf:
            raise ValueError(f"{type(self).__name__}: learning_rate must be a finite number > 0, "
                             f"got {short_repr(learning_rate)}")
        self.learning_rate = float(learning_rate)
        self.schedule = schedule or Schedule()
        self.gradient_clip_norm = gradient_clip_norm
        self.gradient_clip_value = gradient_clip_value
        self.name = name or type(self).__name__
        self.step = 0
        self._norm_work = None

    def state(self, be, param, key, dtype=None):
        """The zero-initialized state tensor ``key`` of ``param`` (made on first use)."""
        if key not in param.states:
            param.states[key] = be.zeros(param.value.shape, dtype=dtype)
        return param.states[key]

    def optimize(self, params, epoch):
        """Update every parameter in ``params`` from its gradient, then count one step."""
        if not params:
            return
        be = params[0].value.backend
        lr = self.schedule.rate(self.learning_rate, epoch, self.step)
        scale = self._clip_scale(be, params)
        for param in params:
            grad = param.grad if scale == 1.0 else param.grad * scale
            if self.gradient_clip_value is not None:
                grad = be.clip(grad, -self.gradient_clip_value, self.gradient_clip_value)
            self.update(be, param, grad, lr)
        self.step += 1

    def _clip_scale(self, be, params):
        """min(1, clip_norm / global L2 norm of all gradients)."""
        if self.gradient_clip_norm is None:
            return 1.0
        if self._norm_work is None:
            self._norm_work = [be.zeros((1,) * p.grad.ndim) for p in params]
        total = 0.0
        for work, p in zip(self._norm_work, params):
            work[:] = be.sum(be.square(p.grad))
            total += float(work.get().ravel()[0])
        norm = math.sqrt(total)
        return min(1.0, self.gradient_clip_norm / (norm + 1e-6))

    def update(self, be, param, grad, lr):
        raise NotImplementedError

    def get_description(self):
        config = {"learning_rate": self.learning_rate, **self._config()}
        if type(self.schedule) is not Schedule:
            config["schedule"] = self.schedule.get_description()
        for key in ("gradient_clip_norm", "gradient_clip_value"):
            if getattr(self, key) is not None:
                config[key] = getattr(self, key)
        return {"type": type(self).__name__, "config": config}

    def _config(self):
        return {}

    def state_dict(self):
        return {"step": np.int64(self.step)}

    def load_state_dict(self, state):
        self.step = int(state["step"])
