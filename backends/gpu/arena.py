"""The GPU backend's parameter arena, made by ``GPUBackend.make_arena``: the layout of
``backends/arena_layout.py`` (one 1-D buffer per dtype of values, of gradients and of each
optimizer state key, each parameter a view at a 16-element-aligned offset), made of the
backend's own tensors, and the fused step as one generated elementwise kernel per run.

A *run* is a stretch of the arena whose parameters an optimizer group updates with the same
decay setting; the default (one optimizer, no ``decay_exclude``) is one run over the whole
arena.  The step calls the optimizer's own op-tree ``update`` once per run, on views of the run
(a :class:`_Run` standing in for a parameter), so the backend generates one kernel (``m``,
``v`` and ``w`` in one pass, ``cuda_codegen.plan_multi``) for all the parameters of the run,
with the same arithmetic per element as the per-parameter updates.  Global-norm clipping is one
reduction per run and one scalar read.
"""
import math

import numpy as np

from ..arena_layout import ArenaLayout


def _rebind(tensor, view):
    """Make device tensor ``tensor`` address ``view``'s memory (same shape, contiguous)."""
    tensor.ptr, tensor.base = view.ptr, view.base


def make_device_arena(be, params):
    """A :class:`DeviceArena` of ``params`` on ``be``, or None when there are none or one of
    their tensors is not contiguous (a view the arena could not rebind)."""
    if not params or not all(t.is_contiguous for p in params for t in (p.value, p.grad)):
        return None
    return DeviceArena(be, params)


class DeviceArena(ArenaLayout):
    """The arena of ``params`` on device backend ``be`` (see the module docstring)."""

    def __init__(self, be, params):
        super().__init__(params)
        self.be = be
        for dt, n in self.sizes.items():
            self.values[dt] = be.zeros((n,), dtype=dt)
            self.grads[dt] = be.zeros((n,), dtype=dt)
        for p in self.params:
            slot = self.slots[id(p)]
            for buffers, tensor in ((self.values, p.value), (self.grads, p.grad)):
                view = self._view(buffers[slot.dtype], slot)
                view[:] = tensor
                _rebind(tensor, view)

    def plan(self, optimizer, params):
        """The fused step of ``optimizer`` over ``params`` (a :class:`DevicePlan`)."""
        return DevicePlan(optimizer, self, params)

    def zero_grads(self):
        for buf in self.grads.values():
            buf[:] = 0.0

    def all_finite(self, states=False):
        """True when no parameter value (with ``states``, also no optimizer state the arena
        holds) is inf or NaN: one reduction per buffer into one scalar, one read.  States
        stored as bfloat16 bits answer False with ``states`` (the caller's per-tensor path
        knows their format)."""
        buffers = self.checked_buffers(states)
        if buffers is None:
            return False
        flag = self.be.scratch(("arena_finite",), (1,))
        flag[:] = 0.0
        for buf in buffers:
            flag[:] = flag + self.be.sum(buf * 0.0)
        return math.isfinite(float(flag.get()[0]))

    def state_buffer(self, key, dtype, storage=None):
        storage = np.dtype(storage) if storage is not None else dtype
        found = self.states.get((key, dtype, storage))
        if found is None:
            found = self.states[(key, dtype, storage)] = self.be.zeros(
                self.values[dtype].shape, dtype=storage)
        return found

    def state(self, param, key, storage=None):
        """``param.states[key]`` as a view of the arena's state buffer (zero on first use; a
        tensor assigned from outside, e.g. by a checkpoint, is copied in)."""
        if self.is_arena_state(param, key):
            return param.states[key]
        current = param.states.get(key)
        slot = self.slots[id(param)]
        view = self._view(self.state_buffer(key, slot.dtype, storage), slot)
        if current is not None:
            view.set(current.get())
        self._state_tensors[(id(param), key)] = view
        param.states[key] = view
        return view


class _Run:
    """A run of the arena standing in for one parameter in ``Optimizer.update``: ``value``,
    ``grad`` and ``states`` are 1-D views; ``decay_flag`` says whether the decay applies."""

    def __init__(self, value, grad, states, decay_flag, name):
        self.value, self.grad, self.states = value, grad, states
        self.decay_flag, self.name = decay_flag, name


class DevicePlan:
    """One optimizer group's fused step over a :class:`DeviceArena` (made once per parameter
    list): the group's runs, and the parameters' state views."""

    def __init__(self, optimizer, arena, params):
        self.arena, self.params = arena, list(params)
        self.ok = arena.holds(params)
        self.runs = []
        self.bound = None
        if not self.ok:
            return
        by_dtype = {}
        for p in self.params:
            slot = arena.slot(p)
            by_dtype.setdefault(slot.dtype, []).append((slot, optimizer.decays(p)))
        for dtype, entries in by_dtype.items():
            entries.sort(key=lambda e: e[0].offset)
            for slot, flag in entries:
                last = self.runs[-1] if self.runs else None
                if last and last[0] == dtype and last[3] == flag and \
                        last[1] + last[2] == slot.offset:
                    last[2] += slot.padded
                else:
                    self.runs.append([dtype, slot.offset, slot.padded, flag])

    def _bind(self, form):
        arena = self.arena
        for p in self.params:
            for key in form.states:
                arena.state(p, key, form.storage)
        self.run_params = []
        for dtype, lo, n, flag in self.runs:
            states = {key: arena.state_buffer(key, dtype, form.storage)[lo:lo + n]
                      for key in form.states}
            self.run_params.append(_Run(arena.values[dtype][lo:lo + n],
                                        arena.grads[dtype][lo:lo + n], states, flag,
                                        f"arena[{lo}:{lo + n}]"))
        self.bound = (form.states, form.storage)

    def sum_squares(self):
        be = self.arena.be
        total = be.scratch(("arena_norm",), (1,))
        total[:] = 0.0
        for dtype, lo, n, _ in self.runs:
            total[:] = total + be.sum(be.square(self.arena.grads[dtype][lo:lo + n]))
        return float(total.get()[0])

    def run(self, optimizer, form, scale, clip_value, lr):
        if self.bound != (form.states, form.storage) or not all(
                self.arena.is_arena_state(p, k) for p in self.params for k in form.states):
            self._bind(form)
        be = self.arena.be
        for run in self.run_params:
            grad = run.grad if scale == 1.0 else run.grad * scale
            if clip_value is not None:
                grad = be.clip(grad, -clip_value, clip_value)
            optimizer.update(be, run, grad, lr)
        return True

