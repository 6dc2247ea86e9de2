"""Mixed-precision training on any backend: float32 master weights and dynamic loss scaling.

:class:`MixedPrecision` wraps an optimizer.  The model keeps its parameters, activations and
gradients in the backend's 16-bit storage (float16 or bfloat16); the wrapper keeps a float32
*master* copy of every parameter (``param.states["master"]``, saved with checkpoints), and
each step

1. unscales the 16-bit gradient into a float32 work tensor (``grad / loss_scale``),
2. with dynamic loss scaling, checks every gradient for inf/NaN with one reduction and one
   scalar read: on overflow the step is **skipped** (no parameter or optimizer state changes),
   the scale is multiplied by ``backoff_factor`` and the skip is counted and logged,
3. runs the wrapped optimizer on float32 stand-ins (master weight, unscaled gradient, float32
   optimizer states) and copies the master weights back into 16-bit storage (rounding to
   nearest even),
4. after ``growth_interval`` finite steps in a row multiplies the scale by ``growth_factor``.

The loss is scaled where the error enters bprop: :meth:`MixedPrecision.wrap_cost` returns the
cost with its output errors multiplied by the current scale.  bfloat16 has float32's range and
needs no scale (``loss_scale=None``): master weights only.

The stand-ins are made once per parameter list and kept; where the backend keeps parameters in
an arena (``be.make_arena``), the masters and their float32 gradients get one of their own, so
the wrapped optimizer's step is its fused pass over them (one C call per step on the CPU)
rather than one update per parameter.  Without loss scaling, where the backend can link the
masters' arena to the 16-bit parameters (``arena.link_copies``: the CPU backend with bf16
parameters, ``backends/cpu/master_link.py``), steps 1 and 3 happen inside that fused pass:
it reads each bf16 gradient and writes each bf16 parameter as it updates the master, one pass
over memory as in float32; a wrapped optimizer that updates per parameter gets its float32
gradients widened in one call when it first reads one, and the copies it leaves are made in
one call after it.

``rounding``: how a master becomes its bf16 copy: ``"nearest"`` (to nearest even),
``"stochastic"`` (up or down with the probabilities that make the copy the master in
expectation, ``backends/shared/bf16_rounding.py``; the random bits are a hash of
``rounding_seed``, the optimizer step, the parameter's place in the list and the element's,
so a run is repeatable and resumes exactly), or ``"auto"``: stochastic where the masters are
linked, nearest elsewhere (the ``-d bf16`` recipe's default).  Stochastic rounding needs linked
masters (bf16 parameters on the CPU backend with its kernels); elsewhere its first step is
refused.  Rounding to nearest loses every update smaller than half a bf16 unit in the last
place in the copy (most of a small learning rate's steps: the model then trains on weights
that lag its masters); stochastic rounding keeps them on average.  A master a checkpoint put in ``param.states`` is copied
into the kept one at the next step.  A state the wrapped optimizer makes in the backend's 16-bit
storage is made float32 instead; the states it asks for as bfloat16 bits on purpose
(``Adam(state_dtype="bf16")``: uint16) stay as they are.

Nothing here is backend-specific (op-trees and tensors only), so the same code runs on the CPU
backend with numpy float16 storage and on the GPU backend with float16/bfloat16.
"""
import logging
import math
from collections.abc import MutableMapping

import numpy as np

from .options import POSITIVE, Choice, Range, check_count, check_options, option_error

log = logging.getLogger("neonlite.mixed_precision")

#: how a master weight may be rounded into its bf16 copy (YAML ``bf16_rounding``;
#: ``MixedPrecision(rounding=...)`` also takes "auto")
ROUNDINGS = ("nearest", "stochastic")


class _LossScale(Range):
    """``loss_scale``: "dynamic", a finite number > 0 (a fixed scale), or None."""

    def __init__(self):
        super().__init__(0, open_low=True, optional=True)

    def describe(self):
        return "'dynamic', a finite number > 0 (a fixed scale) or null (no scaling)"

    def accepts(self, value):
        return value == "dynamic" if isinstance(value, str) else super().accepts(value)

    def normal(self, value):
        return value if isinstance(value, str) else super().normal(value)


def is_16bit_float(tensor):
    """True for a tensor stored as float16 or bfloat16 (the GPU's ``storage`` names, or a
    dtype carrying numpy's ``{"bfloat16": True}`` metadata); plain uint16 bits are not."""
    dtype = np.dtype(tensor.dtype)
    return dtype.itemsize == 2 and dtype.kind == "f" or \
        getattr(tensor, "storage", None) in ("f16", "bf16") or \
        bool((dtype.metadata or {}).get("bfloat16"))


class _Float32States(MutableMapping):
    """``param.states`` seen by the wrapped optimizer: a state it creates in 16-bit float
    storage (a fresh zero tensor) is stored as float32 instead; reads and writes go to the
    parameter's dict."""

    def __init__(self, be, param):
        self.be, self.param = be, param

    def __getitem__(self, key):
        return self.param.states[key]

    def get(self, key, default=None):
        """``param.states.get`` (the fused step asks for every state of every master each
        step: Mapping's ``get`` through ``__getitem__`` and its KeyError cost twice as long)."""
        return self.param.states.get(key, default)

    def __setitem__(self, key, tensor):
        if is_16bit_float(tensor):
            tensor = self.be.zeros(tensor.shape, dtype=np.float32)
        self.param.states[key] = tensor

    def __delitem__(self, key):
        del self.param.states[key]

    def __iter__(self):
        return (k for k in self.param.states if k != "master")

    def __len__(self):
        return sum(1 for _ in self)


class _MasterParameter:
    """The float32 stand-in the wrapped optimizer updates: ``value`` is the master weight,
    ``grad`` the unscaled float32 gradient, ``arena`` the masters' arena (None: none);
    ``name``, ``layer`` and every other attribute are the real parameter's (per-layer
    optimizers, weight-decay groups and logs see the usual names)."""

    def __init__(self, be, param, master, grad):
        self.param, self.value, self._grad = param, master, grad
        self.states = _Float32States(be, param)
        self.arena = None
        #: the arena's link to the 16-bit parameters while it is in use (None: unlinked)
        self.link = None

    @property
    def grad(self):
        """The float32 gradient; in a linked step, widened (every master's, one call) when
        first read."""
        if self.link is not None:
            self.link.widen_grads()
        return self._grad

    def __getattr__(self, name):
        if name in ("param", "_grad", "link"):
            raise AttributeError(name)
        return getattr(self.param, name)


class _ScaledCost:
    """A cost whose output errors are multiplied by the wrapper's current loss scale; the
    returned cost value is the unscaled one.  Every other attribute is the wrapped cost's."""

    def __init__(self, cost, scaler):
        self._cost, self._scaler = cost, scaler

    def cost_and_errors(self, y, t):
        value, deltas = self._cost.cost_and_errors(y, t)
        scale = self._scaler.loss_scale
        if scale != 1.0:
            deltas[:] = deltas * scale
        return value, deltas

    def __getattr__(self, name):
        return getattr(self._cost, name)


class MixedPrecision:
    """``MixedPrecision(optimizer, loss_scale="dynamic")`` (see the module docstring).

    ``loss_scale``: ``"dynamic"`` (start at ``init_scale``, back off on overflow, grow after
    ``growth_interval`` good steps), a number (a fixed scale; overflowing steps are still
    skipped), or None (no scaling and no overflow check: bfloat16).  ``rounding``
    (``"nearest"``, ``"stochastic"`` or ``"auto"``) and ``rounding_seed``: the rounding of the
    bf16 copies (module docstring).
    """

    OPTIONS = {"loss_scale": _LossScale(), "init_scale": POSITIVE,
               "growth_factor": Range(1, open_low=True), "backoff_factor": Range(0, 1, True, True),
               "growth_interval": Range(1, integer=True), "min_scale": POSITIVE,
               "max_scale": POSITIVE, "rounding": Choice(*ROUNDINGS, "auto"),
               "rounding_seed": Range(0, 2 ** 64 - 1, integer=True)}

    def __init__(self, optimizer, loss_scale="dynamic", init_scale=2.0 ** 15,
                 growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 min_scale=1.0, max_scale=2.0 ** 24, rounding="nearest", rounding_seed=0):
        checked = check_options(self, loss_scale=loss_scale, init_scale=init_scale,
                                growth_factor=growth_factor, backoff_factor=backoff_factor,
                                growth_interval=growth_interval, min_scale=min_scale,
                                max_scale=max_scale, rounding=rounding,
                                rounding_seed=rounding_seed)
        if rounding != "nearest" and loss_scale is not None:
            raise option_error(self, "rounding", rounding,
                               "'nearest' with loss scaling (stochastic rounding is for "
                               "bfloat16 copies: loss_scale=None)")
        if checked["max_scale"] < checked["min_scale"]:
            raise option_error(self, "max_scale", max_scale, f">= min_scale ({min_scale})")
        if loss_scale == "dynamic" and not min_scale <= init_scale <= max_scale:
            raise option_error(self, "init_scale", init_scale,
                               f"in [min_scale, max_scale] = [{min_scale}, {max_scale}]")
        if not callable(getattr(optimizer, "optimize", None)) or \
                isinstance(optimizer, MixedPrecision):
            raise option_error(self, "optimizer", optimizer,
                               "an optimizer (GradientDescentMomentum, Adam, MultiOptimizer, ...)")
        self.optimizer = optimizer
        self.dynamic = loss_scale == "dynamic"
        self.check_overflow = loss_scale is not None
        self.loss_scale = float(init_scale if self.dynamic else (loss_scale or 1.0))
        self.growth_factor, self.backoff_factor = checked["growth_factor"], \
            checked["backoff_factor"]
        self.growth_interval = checked["growth_interval"]
        self.min_scale, self.max_scale = checked["min_scale"], checked["max_scale"]
        self.good_steps = 0
        self.skipped_steps = 0
        self.rounding, self.rounding_seed = rounding, checked["rounding_seed"]
        self.name = getattr(optimizer, "name", type(optimizer).__name__)
        self._masters = {}
        self._links = {}
        self._copies_finite = None
        self._flag = None
        self._stepped = None
        self._finite_work = {}

    # ---- the cost side ---------------------------------------------------------------------
    def wrap_cost(self, cost):
        """``cost`` with its errors scaled by the current loss scale (give this to ``fit``)."""
        return _ScaledCost(cost, self)

    # ---- the optimizer side ----------------------------------------------------------------
    @property
    def step(self):
        return self.optimizer.step

    def optimize(self, params, epoch):
        """Unscale, check, update the float32 masters, copy them back (module docstring)."""
        if not params:
            return
        be = params[0].value.backend
        masters = self.masters(params)
        self._stepped = None
        link = self._link(params, masters)
        if link is not None:
            self._linked_step(link, masters, epoch)
        else:
            if not self._unscale(be, params, masters):
                self._skip()
                return
            self.optimizer.optimize(masters, epoch)
            for param, master in zip(params, masters):
                param.value[:] = master.value
            self._copies_finite = None
        self._stepped = tuple(map(id, params))
        self._grow()

    def _link(self, params, masters):
        """The link of the masters' arena to ``params`` (made at the first step, see the module
        docstring; made again for new masters, or parameters whose storage moved), or None:
        loss scaling, no arena, or a backend that does not link.  Stochastic rounding without
        one is refused."""
        link = None
        if not self.check_overflow:
            key = tuple(map(id, params))
            link = self._links.get(key)
            if link is None or link.masters != masters or not link.current():
                arena = masters[0].arena
                link_copies = getattr(arena, "link_copies", None)
                link = self._links[key] = link_copies(params) if link_copies else None
        if link is None and self.rounding == "stochastic":
            be = params[0].value.backend
            raise ValueError(f"MixedPrecision: rounding 'stochastic' needs bfloat16 parameters "
                             f"on the cpu backend (linked float32 masters); got "
                             f"{params[0].value.dtype} parameters on {type(be).__name__}: use "
                             f"rounding='nearest'")
        return link

    def _linked_step(self, link, masters, epoch):
        """The wrapped optimizer's step on linked masters (module docstring)."""
        link.begin("stochastic" if self.rounding == "auto" else self.rounding,
                   self.rounding_seed, self.optimizer.step)
        for master in masters:
            master.link = link
        try:
            self.optimizer.optimize(masters, epoch)
        finally:
            for master in masters:
                master.link = None
            self._copies_finite = link.finish()

    def updated_finite(self, params):
        """True when the last :meth:`optimize` updated exactly ``params`` by the wrapped
        optimizer's fused pass over the masters' arena, which saw every master and state value
        it wrote finite, and every 16-bit parameter rounded from them is finite (one check of
        each: a master beyond the 16-bit range rounds to inf); False otherwise (a skipped
        step, a per-parameter step, other parameters), and then the training loop checks
        every tensor itself."""
        key = tuple(map(id, params))
        verify = getattr(self.optimizer, "updated_finite", None)
        if self._stepped != key or verify is None or not verify(self._masters[key]):
            return False
        if self._copies_finite is not None:
            return self._copies_finite
        be = params[0].value.backend
        return all(be.is_finite(p.value, self._finite_work) for p in params)

    def masters(self, params):
        """The float32 stand-ins the wrapped optimizer updates for ``params`` (a non-empty
        list): made at their first step and kept, in an arena of their own where the backend
        makes one (each stand-in's ``arena``); each master is the one in ``param.states``, one
        a checkpoint put there since being copied into the kept tensor."""
        be = params[0].value.backend
        key = tuple(map(id, params))
        masters = self._masters.get(key)
        if masters is None or any(m.param is not p or m.value.shape != p.value.shape
                                  for m, p in zip(masters, params)):
            masters = self._masters[key] = [self._new_master(be, p) for p in params]
            arena = be.make_arena(masters)
            for master in masters:
                master.arena = arena
        for master, param in zip(masters, params):
            saved = param.states.get("master")
            if saved is not master.value:
                if saved is not None and tuple(saved.shape) == tuple(master.value.shape):
                    master.value[:] = saved
                param.states["master"] = master.value
        return masters

    @staticmethod
    def _new_master(be, param):
        saved = param.states.get("master")
        master = be.zeros(param.value.shape, dtype=np.float32)
        fits = saved is not None and tuple(saved.shape) == tuple(param.value.shape)
        master[:] = saved if fits else param.value
        grad = be.zeros(param.value.shape, dtype=np.float32)
        return _MasterParameter(be, param, master, grad)

    def _unscale(self, be, params, masters):
        """Write grad / scale into the float32 gradients; False when any is inf or NaN."""
        inverse = 1.0 / self.loss_scale
        if self.check_overflow and self._flag is None:
            self._flag = be.zeros((1, 1), dtype=np.float32)
        if self.check_overflow:
            self._flag[:] = 0.0
        for param, master in zip(params, masters):
            master.grad[:] = param.grad * inverse if inverse != 1.0 else param.grad
            if self.check_overflow:
                self._flag[:] = self._flag + be.sum(master.grad.reshape(1, -1) * 0.0)
        return not self.check_overflow or math.isfinite(float(self._flag.get().ravel()[0]))

    def _skip(self):
        self.skipped_steps += 1
        self.good_steps = 0
        before = self.loss_scale
        if self.dynamic:
            self.loss_scale = max(self.min_scale, self.loss_scale * self.backoff_factor)
        log.warning("mixed precision: inf/NaN gradients, step skipped (%d skipped so far); "
                    "loss scale %g -> %g", self.skipped_steps, before, self.loss_scale)

    def _grow(self):
        self.good_steps += 1
        if self.dynamic and self.good_steps >= self.growth_interval:
            self.loss_scale = min(self.max_scale, self.loss_scale * self.growth_factor)
            self.good_steps = 0

    # ---- description and checkpoints -------------------------------------------------------
    def check_parameters(self, params):
        """The wrapped optimizer's check of the model's parameters, where it has one."""
        getattr(self.optimizer, "check_parameters", lambda params: None)(params)

    def get_description(self):
        return self.optimizer.get_description()

    def state_dict(self):
        inner = self.optimizer.state_dict() if hasattr(self.optimizer, "state_dict") else {}
        return {**inner, "loss_scale": self.loss_scale, "good_steps": self.good_steps,
                "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state):
        state = dict(state)
        self.loss_scale = float(state.pop("loss_scale", self.loss_scale))
        self.good_steps = check_count(self, "good_steps", state.pop("good_steps", 0))
        self.skipped_steps = check_count(self, "skipped_steps", state.pop("skipped_steps", 0))
        if hasattr(self.optimizer, "load_state_dict"):
            self.optimizer.load_state_dict(state)


#: how ``-d bf16`` rounds the float32 masters into the bf16 parameters unless told
#: (``bf16_rounding``): stochastically where the masters are linked (MixedPrecision's "auto")
BF16_ROUNDING = "auto"


def for_datatype(optimizer, datatype, bf16_rounding=None):
    """``optimizer`` wrapped for training in ``datatype`` ('f16': dynamic loss scaling,
    'bf16': master weights only, their bf16 copies rounded as ``bf16_rounding`` says, one of
    ``ROUNDINGS``; None: :data:`BF16_ROUNDING`); any other data type returns it unchanged."""
    if datatype == "f16":
        return MixedPrecision(optimizer, loss_scale="dynamic")
    if datatype == "bf16":
        return MixedPrecision(optimizer, loss_scale=None,
                              rounding=bf16_rounding or BF16_ROUNDING)
    return optimizer
