"""The CPU backend's parameter arena: a model's parameters, gradients and optimizer states in
a few contiguous numpy buffers, each parameter a view into them (the layout of
``backends/arena_layout.py``), made by ``CPUBackend.make_arena``.

Per dtype of the parameters the arena holds one 1-D buffer of values and one of gradients;
each optimizer state key (``"m"``, ``"velocity"``, ...) gets, on first use, one buffer per
dtype of the same layout.  Every buffer comes from ``aligned_empty``, so every view starts on a
64-byte boundary like the backend's own tensors.  The model's ``Parameter.value``, ``.grad``
and ``.states[key]`` are rebound to views of these buffers (the tensor objects stay the same,
so layers holding them see the arena), which gives

* zeroing every gradient with one fill per dtype (:meth:`ParameterArena.zero_grads`),
* an optimizer step over all parameters of a dtype as one C call (``kernels/cpu/
  fused_optim.c``, through :mod:`.fused_update`), one call per optimizer group
  (:meth:`ParameterArena.plan`),
* the squared global gradient norm of any set of parameters in one reduction pass, and "are
  all parameters finite" in one pass per dtype (:meth:`ParameterArena.all_finite`).

An arena of float32 masters can be linked to the bf16 parameters they stand for
(:meth:`ParameterArena.link_copies`, ``MixedPrecision``'s masters): its fused step then reads
the bf16 gradients and writes the bf16 parameters in the same pass (:mod:`.master_link`).

A state tensor replaced from outside (a checkpoint being loaded assigns new tensors to
``param.states``) is copied back into the arena the next time the arena updates that
parameter (:meth:`ParameterArena.state`).
"""
import numpy as np

from ..arena_layout import ArenaLayout
from ..storage import array_is_finite
from .fused_update import FusedPlan
from .master_link import link_masters
from .tensor import CPUTensor, aligned_empty


def make_cpu_arena(be, params):
    """A :class:`ParameterArena` of ``params`` on CPU backend ``be``, or None when there are
    none or one of their tensors is not a contiguous array of this backend."""
    if not params or any(not isinstance(t, CPUTensor) or not t._ary.flags.c_contiguous
                         for p in params for t in (p.value, p.grad)):
        return None
    return ParameterArena(be, params)


class ParameterArena(ArenaLayout):
    """The buffers of ``params`` (see the module docstring); made by :func:`make_cpu_arena`."""

    def __init__(self, be, params):
        super().__init__(params)
        self.be = be
        #: the :class:`~.master_link.MasterLink` to bf16 parameters (None: not linked)
        self.link = None
        for dt, n in self.sizes.items():
            self.values[dt] = aligned_empty((n,), dt)
            self.grads[dt] = aligned_empty((n,), dt)
        for buf in (*self.values.values(), *self.grads.values()):
            buf.fill(0)
        for p in self.params:
            slot = self.slots[id(p)]
            for buffers, tensor in ((self.values, p.value), (self.grads, p.grad)):
                view = self._view(buffers[slot.dtype], slot)
                view[...] = tensor._ary
                tensor._ary = view

    def plan(self, optimizer, params):
        """The fused step of ``optimizer`` over ``params`` (a :class:`~.fused_update.FusedPlan`,
        made once per parameter list)."""
        return FusedPlan(optimizer, self, params)

    def link_copies(self, params):
        """Link this arena's parameters (float32 masters) to ``params``, the bf16 parameters
        they stand for, in the same order; the link (:class:`~.master_link.MasterLink`), or
        None where it cannot be made (then nothing changes)."""
        link = link_masters(self, self.params, params)
        if link is not None:
            self.link = link
        return link

    # ---- gradients ---------------------------------------------------------------------------
    def zero_grads(self):
        """Every gradient = 0: one fill per dtype."""
        for buf in self.grads.values():
            buf.fill(0)

    def all_finite(self, states=False):
        """True when no parameter value (with ``states``, also no optimizer state the arena
        holds) is inf or NaN: one pass per buffer, allocating nothing.  States stored as
        bfloat16 bits are not read here: with ``states`` their presence answers False, so the
        caller takes its per-tensor path, which knows their format."""
        buffers = self.checked_buffers(states)
        if buffers is None:
            return False
        for buf in buffers:
            module = self.be.kernels.module("fused_optim", buf.dtype)
            if module is None:
                if not array_is_finite(buf):
                    return False
            elif not module.lib.all_finite(module.ffi.from_buffer("real[]", buf), buf.size):
                return False
        return True

    # ---- optimizer states --------------------------------------------------------------------
    def state_buffer(self, key, dtype, storage=None):
        """The arena-wide buffer of state ``key`` for parameters of ``dtype`` (zeros on first
        use), elements of ``storage`` (default ``dtype``; uint16 for bfloat16 states)."""
        storage = np.dtype(storage or dtype)
        found = self.states.get((key, np.dtype(dtype), storage))
        if found is None:
            found = aligned_empty(self.values[np.dtype(dtype)].shape, storage)
            found.fill(0)
            self.states[(key, np.dtype(dtype), storage)] = found
        return found

    def state(self, param, key, storage=None):
        """``param.states[key]`` as a view of the arena's state buffer: made zero on first
        use; a tensor put there from outside (loading a checkpoint assigns new tensors to
        ``param.states``) is copied into the arena and replaced by the view."""
        if self.is_arena_state(param, key):
            return param.states[key]
        current = param.states.get(key)
        slot = self.slots[id(param)]
        view = self._view(self.state_buffer(key, slot.dtype, storage), slot)
        if current is not None:
            view[...] = np.asarray(current.get()).reshape(view.shape)
        tensor = self._state_tensors[(id(param), key)] = CPUTensor(self.be, view)
        param.states[key] = tensor
        return tensor
