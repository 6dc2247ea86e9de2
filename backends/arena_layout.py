"""Where each parameter lives in a parameter arena's buffers, and what every arena shares (the
CPU's :class:`~.cpu.arena.ParameterArena`, the GPU's :class:`~.gpu.arena.DeviceArena`): per
dtype one 1-D buffer, parameter ``p`` at ``[offset, offset + p.size)``, offsets rounded up to
``ALIGN_ELEMENTS`` elements (64 bytes of float32)."""
import numpy as np

ALIGN_ELEMENTS = 16


class _Slot:
    """Where one parameter lives: its dtype's buffers and ``[offset, offset + size)``;
    ``padded`` is the size rounded up to ``ALIGN_ELEMENTS`` (the next slot's offset)."""

    __slots__ = ("dtype", "offset", "size", "shape", "padded")

    def __init__(self, dtype, offset, size, shape):
        self.dtype, self.offset, self.size, self.shape = dtype, offset, size, shape
        self.padded = -(-size // ALIGN_ELEMENTS) * ALIGN_ELEMENTS


def layout_slots(params):
    """``({id(param): _Slot}, {dtype: buffer length})``: each parameter's place in its dtype's
    buffer, in order, every offset a multiple of ``ALIGN_ELEMENTS``."""
    slots, sizes = {}, {}
    for p in params:
        dtype = np.dtype(p.value.dtype)
        offset = sizes.get(dtype, 0)
        slot = slots[id(p)] = _Slot(dtype, offset, int(p.value.size), tuple(p.value.shape))
        sizes[dtype] = offset + slot.padded
    return slots, sizes


class ArenaLayout:
    """The part of an arena that is only bookkeeping: the parameters, their slots, the
    buffers (``values``, ``grads``: {dtype: 1-D buffer}; ``states``: {(key, dtype, storage):
    1-D buffer}) and the state tensors the arena made.  A backend's arena fills the buffers."""

    def __init__(self, params):
        self.params = list(params)
        self.slots, self.sizes = layout_slots(self.params)
        self.values, self.grads, self.states = {}, {}, {}
        self._state_tensors = {}

    @staticmethod
    def _view(buffer, slot):
        """``slot``'s part of a 1-D buffer (numpy array or backend tensor), in its shape."""
        return buffer[slot.offset:slot.offset + slot.size].reshape(slot.shape)

    def holds(self, params):
        """True when every parameter of ``params`` lives in this arena."""
        slots = self.slots
        return all(id(p) in slots for p in params)

    def slot(self, param):
        return self.slots[id(param)]

    def is_arena_state(self, param, key):
        """True when ``param.states[key]`` is the view this arena made for it."""
        known = self._state_tensors.get((id(param), key))
        return known is not None and param.states.get(key) is known

    def checked_buffers(self, states):
        """The buffers an ``all_finite(states)`` pass reads: every value buffer, with
        ``states`` also every state buffer; None when a state is stored in another format
        than its parameters (bfloat16 bits), which only the caller's per-tensor path reads."""
        buffers = list(self.values.values())
        if states:
            for (_, dtype, storage), buf in self.states.items():
                if storage != dtype:
                    return None
                buffers.append(buf)
        return buffers

    def states_outside(self, params):
        """``(name, tensor)`` of the optimizer states of ``params`` that are not views of
        this arena (those of an optimizer without a fused form, or freshly loaded ones)."""
        for p in params:
            for key, tensor in p.states.items():
                if not self.is_arena_state(p, key):
                    yield f"{p.name}/{key}", tensor
