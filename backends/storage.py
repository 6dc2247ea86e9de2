"""The storage part of the backend contract: what the rest of neonlite may ask a backend about
where its tensors' values live, so that nothing outside ``backends/`` reads a tensor's private
fields (a CPU tensor's numpy array, a GPU tensor's device address) or tests for a backend's
class.

* ``make_arena(params)``: the parameter arena of ``params`` (a model's parameters, gradients
  and optimizer states in one contiguous buffer per dtype, each parameter a view; see
  ``backends/arena_layout.py``), or None where the backend keeps them apart.  An arena has
  ``zero_grads()``, ``all_finite(states=False)``, ``states_outside(params)``, ``slot(param)``,
  ``grads[dtype]`` and ``plan(optimizer, params)``: the fused update of one optimizer group
  (``ok``, ``sum_squares()``, ``run(optimizer, form, scale, clip_value, lr)``, and where the
  backend's pass checks what it writes, ``finite``).  An arena of float32 masters may also
  have ``link_copies(params16)`` (the CPU's): the link (``masters``, ``current()``,
  ``begin(rounding, seed, step)``, ``widen_grads()``, ``finish()``) through which its fused
  plans read the 16-bit gradients and write the 16-bit copies (``MixedPrecision``).
* ``is_finite(tensor, work)``: no NaN and no inf in ``tensor``, allocating nothing.
* ``buffer_of(tensor)``: ``(key, bytes)`` of the memory behind ``tensor`` (views of one
  buffer share its key), for the profiler's memory table.
* ``workspace_bytes()``: the bytes of the work buffers the backend keeps for all layers.
* ``device_pointer(tensor)``: the device address of ``tensor``'s first element, for libraries
  that take raw pointers (NCCL); only backends with device memory have one.

The defaults here hold for any backend whose tensors implement ``backends.backend.Tensor``;
a backend overrides what it can do faster or must do by its own layout.
"""
import math

import numpy as np

#: bytes the aligned allocator may add to a host buffer (see ``cpu/tensor.py``)
ALIGNMENT_SLACK = 64


def array_is_finite(ary):
    """True when the host array ``ary`` (any shape, float or integer) holds no NaN or inf:
    two reductions (min and max propagate NaN and reach an inf), nothing allocated."""
    ary = np.asarray(ary)
    if ary.size == 0 or not np.issubdtype(ary.dtype, np.inexact):
        return True
    return math.isfinite(float(ary.min())) and math.isfinite(float(ary.max()))


def host_buffer(ary):
    """``(key, bytes)`` of the allocation behind host array ``ary``: the whole allocation (with
    the aligned allocator's slack) when ``ary`` is all of it, else, for a view into a shared
    buffer (the parameter arena), the view's own bytes, keyed by its address."""
    root = ary
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.nbytes <= ary.nbytes + ALIGNMENT_SLACK:
        return ("host", id(root)), int(root.nbytes)
    return ("host", id(root), ary.__array_interface__["data"][0]), int(ary.nbytes)


def _is_tensor(thing):
    return hasattr(thing, "backend") and hasattr(thing, "shape")


class StorageOps:
    """The storage methods of :class:`~.backend.Backend` (see the module docstring)."""

    def make_arena(self, params):
        """The parameter arena of ``params`` (a list of ``Parameter``), or None: by default a
        backend keeps every parameter in its own tensor and updates it per parameter."""
        return None

    def is_finite(self, tensor, work=None):
        """True when ``tensor`` holds no NaN or inf: its ``max`` and ``min`` op-trees into a
        one-element tensor kept in ``work`` (a dict, per shape and dtype), one scalar read
        each."""
        key = (tensor.ndim, np.dtype(tensor.dtype).str)
        cache = work if work is not None else {}
        if key not in cache:
            cache[key] = self.zeros((1,) * tensor.ndim, dtype=tensor.dtype)
        out = cache[key]
        for reduce in (self.max, self.min):
            out[:] = reduce(tensor)
            if not math.isfinite(float(out.get().ravel()[0])):
                return False
        return True

    def buffer_of(self, tensor):
        """``(key, bytes)`` of the memory behind ``tensor``: by default the tensor's own
        elements, keyed by the tensor."""
        nbytes = int(np.prod(tensor.shape)) * np.dtype(tensor.dtype).itemsize
        return ("tensor", id(tensor)), nbytes

    def workspace_holders(self):
        """The containers (dicts, lists, tensors, host arrays) of the work buffers this backend
        keeps for all layers; none by default."""
        return []

    def workspace_bytes(self):
        """Bytes of the work buffers of :meth:`workspace_holders`, each buffer counted once."""
        seen, total = set(), 0
        stack = [h for h in self.workspace_holders() if h]
        while stack:
            thing = stack.pop()
            if isinstance(thing, dict):
                stack.extend(thing.values())
            elif isinstance(thing, (list, tuple)):
                stack.extend(thing)
            elif isinstance(thing, np.ndarray) or _is_tensor(thing):
                key, nbytes = host_buffer(thing) if isinstance(thing, np.ndarray) else \
                    self.buffer_of(thing)
                if key not in seen:
                    seen.add(key)
                    total += nbytes
        return total

    def device_pointer(self, tensor):
        """The device address of ``tensor``'s first element; a backend without device memory
        has none."""
        raise TypeError(f"the {self.name} backend keeps tensors in host memory: "
                        f"{tensor!r} has no device pointer")
