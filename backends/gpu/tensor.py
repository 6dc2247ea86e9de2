"""Device tensors of the GPU backend: the CPU tensor's interface over device memory.

A :class:`GPUTensor` is a view: a pointer into a pooled allocation (``base``, kept alive by the
view), a shape, element strides (>= 0) and a storage code (``cuda_codegen.STORAGE``: 'f32',
'f16', 'bf16', integers).  Slicing with positive steps and ``.T`` make views without copying;
``reshape`` views contiguous tensors only.  bfloat16 storage is uint16 bits with a flag: its
``dtype`` is :data:`BFLOAT16` (numpy's uint16 carrying ``{"bfloat16": True}`` metadata, as numpy
has no bfloat16), ``get()`` returns float32 values and ``set()`` rounds to nearest even.
"""
import numpy as np

from . import codegen as cuda_codegen
from ..backend import Tensor
from ..shared.bfloat16 import BFLOAT16, as_dtype, bf16_to_f32, f32_to_bf16, is_bf16

__all__ = ["BFLOAT16", "GPUTensor", "as_dtype", "contiguous_strides", "is_bf16"]


def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.insert(0, acc)
        acc *= int(s)
    return tuple(strides)


class GPUTensor(Tensor):
    """A strided view of device memory (see the module docstring)."""

    __slots__ = ("backend", "_shape", "strides", "_dtype", "storage", "ptr", "base", "name")

    def __init__(self, backend, shape, dtype, ptr, base, strides=None, name=None):
        self.backend = backend
        self._shape = tuple(int(s) for s in shape)
        self._dtype = as_dtype(dtype)
        self.storage = cuda_codegen.storage_code(self._dtype, is_bf16(self._dtype))
        self.strides = contiguous_strides(self._shape) if strides is None else tuple(strides)
        self.ptr, self.base, self.name = int(ptr), base, name

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def itemsize(self):
        return self._dtype.itemsize

    @property
    def is_contiguous(self):
        return all(st == c for s, st, c in zip(self._shape, self.strides,
                                               contiguous_strides(self._shape)) if s != 1)

    @property
    def host_dtype(self):
        """The dtype ``get()`` returns (float32 for bfloat16 storage)."""
        return np.dtype(np.float32) if self.storage == "bf16" else np.dtype(self._dtype.str)

    def _view(self, shape, strides, offset):
        return GPUTensor(self.backend, shape, self._dtype, self.ptr + offset * self.itemsize,
                         self.base, strides)

    # ---- host copies ---------------------------------------------------------------------
    def get(self):
        """A host copy (float32 values for bfloat16 storage)."""
        raw = self.backend.copy_to_host(self)
        return bf16_to_f32(raw).reshape(self._shape) if self.storage == "bf16" else raw

    def set(self, ary):
        """Copy host array ``ary`` in (same shape, or same size: reshaped)."""
        ary = np.asarray(ary)
        if ary.shape != self._shape and ary.size != self.size:
            raise ValueError(f"cannot set a tensor of shape {self._shape} from an array of shape "
                             f"{ary.shape}")
        self.backend.copy_from_host(self, self.host_bits(ary.reshape(self._shape)))
        return self

    def host_bits(self, ary):
        """``ary`` converted to this tensor's storage, as a contiguous host array."""
        if self.storage == "bf16":
            return f32_to_bf16(np.asarray(ary, dtype=np.float32))
        return np.ascontiguousarray(ary, dtype=np.dtype(self._dtype.str))

    def __array__(self, dtype=None, copy=None):
        host = self.get()
        return host if dtype is None else host.astype(dtype)

    # ---- views ---------------------------------------------------------------------------
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if shape.count(-1) > 1:
            raise ValueError(f"reshape of {self._shape} to {shape}: at most one -1")
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape a tensor of shape {self._shape} to {shape}")
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if int(np.prod(shape)) != self.size:
            raise ValueError(f"cannot reshape a tensor of shape {self._shape} (size {self.size}) "
                             f"to {shape}")
        if not self.is_contiguous:
            raise ValueError(f"reshape of a non-contiguous {self._shape} view to {shape} would "
                             f"copy")
        return self._view(shape, None, 0)

    @property
    def T(self):
        return self._view(self._shape[::-1], self.strides[::-1], 0)

    def transpose(self, axes):
        """A view with axes permuted (numpy.transpose order)."""
        axes = [a % self.ndim for a in axes]
        return self._view([self._shape[a] for a in axes], [self.strides[a] for a in axes], 0)

    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        if any(i is Ellipsis for i in index):
            at = next(k for k, i in enumerate(index) if i is Ellipsis)
            fill = self.ndim - (len(index) - 1)
            index = index[:at] + (slice(None),) * fill + index[at + 1:]
        if len(index) > self.ndim:
            raise IndexError(f"too many indices ({len(index)}) for a tensor of shape "
                             f"{self._shape}")
        shape, strides, offset = [], [], 0
        for axis, (size, stride) in enumerate(zip(self._shape, self.strides)):
            item = index[axis] if axis < len(index) else slice(None)
            if isinstance(item, (int, np.integer)):
                k = int(item) + size if item < 0 else int(item)
                if not 0 <= k < size:
                    raise IndexError(f"index {item} is out of bounds for axis {axis} of size "
                                     f"{size}")
                offset += k * stride
            elif isinstance(item, slice):
                start, stop, step = item.indices(size)
                if step < 1:
                    raise IndexError(f"GPU tensor views take positive slice steps, got {item}")
                n = max(0, -(-(stop - start) // step))
                offset += start * stride if n else 0
                shape.append(n)
                strides.append(stride * step)
            else:
                raise TypeError(f"GPU tensors are indexed by ints and slices, got "
                                f"{type(item).__name__} at axis {axis}")
        return self._view(shape, strides, offset)

    def __setitem__(self, index, value):
        view = self if _is_full(index) else self[index]
        self.backend.execute(view, value)

    def __repr__(self):
        kind = "bfloat16" if self.storage == "bf16" else self._dtype.name
        return f"GPUTensor(shape={self._shape}, dtype={kind})"


def _is_full(index):
    return (isinstance(index, slice) and index == slice(None)) or index is Ellipsis
