"""The optimizer base: schedules, gradient clipping and per-parameter state.

Every update rule is written once with op-trees (``param.value[:] = ...``), so it runs fused on
each backend.  Optimizer state lives on the parameters (``param.states``) and is saved with
checkpoints; ``step`` counts updates.

Where the parameters live in a parameter arena (the backend's ``make_arena``, see
``backends/storage.py``) and the optimizer declares its fused form (``fused_form``,
:mod:`.fused_form`), a step is instead the arena's fused pass over all the parameters given
(on the CPU one C call per dtype, with bit-identical results; on the GPU one generated kernel
per run); global-norm clipping is then one reduction pass.  An optimizer without a fused form
(``fused_form`` returning None, the default here) runs per parameter.

Weight-decay groups: ``decay_exclude`` (a list of ``"1d"``: parameters of fewer than 2 axes,
i.e. biases and normalization gains; ``"embeddings"``: the tables of Embedding and
PositionalEmbedding layers) leaves those parameters out of the optimizer's weight decay.  The
default, no exclusion, decays every parameter.
"""
import math

import numpy as np

from .fused_form import clip_scale
from .options import (POSITIVE, POSITIVE_OR_NONE, HasRate, Text, Words, check_count,
                      check_options)
from .schedules import Schedule

DECAY_EXCLUSIONS = ("1d", "embeddings")


class Optimizer:
    """Base class.  Subclasses implement ``update(be, param, grad, lr)``, where ``grad`` is an
    op-tree of the (clipped) gradient."""

    OPTIONS = {"learning_rate": POSITIVE, "schedule": HasRate(),
               "gradient_clip_norm": POSITIVE_OR_NONE, "gradient_clip_value": POSITIVE_OR_NONE,
               "name": Text(), "decay_exclude": Words(*DECAY_EXCLUSIONS)}

    def __init__(self, learning_rate, schedule=None, gradient_clip_norm=None,
                 gradient_clip_value=None, name=None, decay_exclude=()):
        checked = check_options(self, learning_rate=learning_rate, schedule=schedule,
                                gradient_clip_norm=gradient_clip_norm,
                                gradient_clip_value=gradient_clip_value, name=name,
                                decay_exclude=decay_exclude)
        self.learning_rate = checked["learning_rate"]
        self.schedule = schedule or Schedule()
        self.gradient_clip_norm = checked["gradient_clip_norm"]
        self.gradient_clip_value = checked["gradient_clip_value"]
        self.name = name or type(self).__name__
        self.step = 0
        self._norm_work = None
        self.decay_exclude = checked["decay_exclude"]
        self._fused_plans = {}
        self._last_update = None

    def decays(self, param):
        """True when the weight decay applies to ``param`` (see ``decay_exclude``)."""
        flag = getattr(param, "decay_flag", None)
        if flag is not None:
            return flag
        if not self.decay_exclude:
            return True
        if "1d" in self.decay_exclude and len(param.value.shape) < 2:
            return False
        if "embeddings" in self.decay_exclude and \
                type(param.layer).__name__ in ("Embedding", "PositionalEmbedding"):
            return False
        return True

    def fused_form(self, lr):
        """The :class:`~.fused_form.FusedForm` of this step's update at learning rate ``lr``, or
        None when the optimizer has none (then every step runs per parameter)."""
        return None

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
        self._last_update = None
        if self._optimize_fused(params, lr):
            self.step += 1
            return
        scale = self._clip_scale(be, params)
        for param in params:
            grad = param.grad if scale == 1.0 else param.grad * scale
            if self.gradient_clip_value is not None:
                grad = be.clip(grad, -self.gradient_clip_value, self.gradient_clip_value)
            self.update(be, param, grad, lr)
        self.step += 1

    def _optimize_fused(self, params, lr):
        """One fused step over the parameter arena; False (nothing done) where it cannot."""
        arena = getattr(params[0], "arena", None)
        if arena is None:
            return False
        form = self.fused_form(lr)
        if form is None:
            return False
        key = tuple(map(id, params))
        plan = self._fused_plans.get(key)
        if plan is None:
            plan = self._fused_plans[key] = arena.plan(self, params)
        if not plan.ok:
            return False
        scale = 1.0 if self.gradient_clip_norm is None else \
            clip_scale(self.gradient_clip_norm, plan.sum_squares())
        done = plan.run(self, form, scale, self.gradient_clip_value, lr)
        if done:
            self._last_update = (key, getattr(plan, "finite", False))
        return done

    def updated_finite(self, params):
        """True when the last :meth:`optimize` updated exactly ``params`` in one fused pass
        over their arena and every weight and state value it wrote is finite (so the training
        loop's NaN/inf guard needs no pass over them); False otherwise, also when that is
        unknown (a per-parameter update, a backend whose fused pass does not say)."""
        last = self._last_update
        return last is not None and last[1] and last[0] == tuple(map(id, params))

    def _clip_scale(self, be, params):
        """min(1, clip_norm / global L2 norm of all gradients), each gradient's sum of
        squares taken into float32 (or float64) whatever the storage: a 16-bit one would round
        it."""
        if self.gradient_clip_norm is None:
            return 1.0
        if self._norm_work is None:
            self._norm_work = [be.zeros((1,) * p.grad.ndim, dtype=_sum_dtype(p.grad))
                               for p in params]
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
        if self.decay_exclude:
            config["decay_exclude"] = list(self.decay_exclude)
        return {"type": type(self).__name__, "config": config}

    def _config(self):
        return {}

    def state_dict(self):
        return {"step": np.int64(self.step)}

    def load_state_dict(self, state):
        """Take ``state_dict()``'s values; the step must be a counter this optimizer can go
        on from (:func:`~.options.check_count`)."""
        self.step = check_count(self, "step", state["step"])


def _sum_dtype(tensor):
    """float64 for a float64 tensor, else float32 (the type a reduction of it is kept in)."""
    dtype = np.dtype(tensor.dtype)
    return np.float64 if dtype == np.float64 and not dtype.metadata else np.float32
