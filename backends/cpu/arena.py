"""The parameter arena: a model's parameters, gradients and optimizer states in a few
contiguous buffers, each parameter a view into them.

Per dtype of the parameters the arena holds one 1-D buffer of values and one of gradients;
each optimizer state key (``"m"``, ``"velocity"``, ...) gets, on first use, one buffer per
dtype of the same layout.  Parameter ``p`` occupies elements ``[offset, offset + p.size)`` of
its dtype's buffers, offsets rounded up to 16 elements so that every view starts on a 64-byte
boundary like the backend's own tensors.  The model's ``Parameter.value``, ``.grad`` and
``.states[key]`` are rebound to views of these buffers (the tensor objects stay the same, so
layers holding them see the arena), which gives

* zeroing every gradient with one fill per dtype (:meth:`ParameterArena.zero_grads`),
* an optimizer step over all parameters of a dtype as one C call (``kernels/cpu/
  fused_optim.c``, through :mod:`.fused`), one call per optimizer group,
* the squared global gradient norm of any set of parameters in one reduction pass
  (:meth:`ParameterArena.sum_squares`), and "are all parameters finite" in one pass per dtype
  (:meth:`ParameterArena.all_finite`).

On a device backend (the GPU's) :func:`build_arena` makes a
:class:`~.device_arena.DeviceArena` instead, whose fused step is one generated kernel per run
of parameters; elsewhere it returns None and everything runs per parameter.  A state tensor
replaced from outside (a checkpoint being loaded assigns new tensors to ``param.states``) is
copied back into the arena the next time the arena updates that parameter
(:meth:`ParameterArena.adopt_states`).
"""
import numpy as np

from .arena_layout import layout_slots


def build_arena(be, params):
    """A :class:`ParameterArena` for ``params`` on the CPU backend, a
    :class:`~.device_arena.DeviceArena` on a device backend whose tensors address memory by
    ``ptr``/``base`` (the GPU's), or None where neither applies."""
    from ..backends.cpu.backend import CPUBackend
    from ..backends.cpu.tensor import CPUTensor
    if not params:
        return None
    if not isinstance(be, CPUBackend):
        tensors = [t for p in params for t in (p.value, p.grad)]
        if all(hasattr(t, "ptr") and hasattr(t, "base") and t.is_contiguous for t in tensors):
            from .device_arena import DeviceArena
            return DeviceArena(be, params)
        return None
    if any(not isinstance(t, CPUTensor) or not t._ary.flags.c_contiguous
           for p in params for t in (p.value, p.grad)):
        return None
    return ParameterArena(be, params)


class ParameterArena:
    """The buffers of ``params`` (see the module docstring); made by :func:`build_arena`."""

    def __init__(self, be, params):
        from ..backends.cpu.tensor import aligned_empty
        self.be = be
        self.params = list(params)
        self.slots, sizes = layout_slots(self.params)
        self.values = {dt: aligned_empty((n,), dt) for dt, n in sizes.items()}
        self.grads = {dt: aligned_empty((n,), dt) for dt, n in sizes.items()}
        for buf in (*self.values.values(), *self.grads.values()):
            buf.fill(0)
        self.states = {}
        self._state_tensors = {}
        for p in self.params:
            slot = self.slots[id(p)]
            for buffers, tensor in ((self.values, p.value), (self.grads, p.grad)):
                view = self._view(buffers[slot.dtype], slot)
                view[...] = tensor._ary
                tensor._ary = view

    @staticmethod
    def _view(buffer, slot):
        return buffer[slot.offset:slot.offset + slot.size].reshape(slot.shape)

    def holds(self, params):
        """True when every parameter of ``params`` lives in this arena."""
        slots = self.slots
        return all(id(p) in slots for p in params)

    def slot(self, param):
        return self.slots[id(param)]

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
        from ..finite import array_is_finite
        buffers = list(self.values.values())
        if states:
            for (_, dtype, storage), buf in self.states.items():
                if storage != dtype:
                    return False
                buffers.append(buf)
        for buf in buffers:
            module = self.be.kernels.module("fused_optim", buf.dtype)
            if module is None:
                if not array_is_finite(buf):
                    return False
            elif not module.lib.all_finite(module.ffi.from_buffer("real[]", buf), buf.size):
                return False
        return True

    def states_outside(self, params):
        """``(name, tensor)`` of the optimizer states of ``params`` that are not views of
        this arena (those of an optimizer without a fused form, or freshly loaded ones)."""
        known = self._state_tensors
        for p in params:
            for key, tensor in p.states.items():
                if known.get((id(p), key)) is not tensor:
                    yield f"{p.name}/{key}", tensor

    # ---- optimizer states --------------------------------------------------------------------
    def state_buffer(self, key, dtype, storage=None):
        """The arena-wide buffer of state ``key`` for parameters of ``dtype`` (zeros on first
        use), elements of ``storage`` (default ``dtype``; uint16 for bfloat16 states)."""
        storage = np.dtype(storage or dtype)
        found = self.states.get((key, np.dtype(dtype), storage))
        if found is None:
            from ..backends.cpu.tensor import aligned_empty
            found = aligned_empty(self.values[np.dtype(dtype)].shape, storage)
            found.fill(0)
            self.states[(key, np.dtype(dtype), storage)] = found
        return found

    def state(self, param, key, storage=None):
        """``param.states[key]`` as a view of the arena's state buffer: made zero on first
        use; a tensor put there from outside (loading a checkpoint assigns new tensors to
        ``param.states``) is copied into the arena and replaced by the view."""
        from ..backends.cpu.tensor import CPUTensor
        current = param.states.get(key)
        known = self._state_tensors.get((id(param), key))
        if known is not None and current is known:
            return known
        slot = self.slots[id(param)]
        view = self._view(self.state_buffer(key, slot.dtype, storage), slot)
        if current is not None:
            view[...] = np.asarray(current.get()).reshape(view.shape)
        tensor = self._state_tensors[(id(param), key)] = CPUTensor(self.be, view)
        param.states[key] = tensor
        return tensor
