"""Where each parameter lives in an arena's buffers (the CPU's
:class:`~.arena.ParameterArena` and the GPU's :class:`~.device_arena.DeviceArena` share it):
per dtype one 1-D buffer, parameter ``p`` at ``[offset, offset + p.size)``, offsets rounded up
to ``ALIGN_ELEMENTS`` elements (64 bytes of float32)."""
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
