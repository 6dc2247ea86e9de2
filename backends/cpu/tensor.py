"""The CPU backend's tensors: :class:`CPUTensor`, a numpy array (``_ary``) whose slices and
reshapes are views, in memory aligned to 64 bytes (:func:`aligned_empty`).

A bfloat16 tensor's array holds uint16 bit patterns of dtype
:data:`~neonlite.backends.shared.bfloat16.BFLOAT16` (``bf16`` is True): ``get()`` gives float32
values (exact), ``set()`` rounds float values to nearest even with the backend's cast kernel,
and the backend's ops see float32 work arrays (``bf16_boundary.py``), never the bits."""
import numbers

import numpy as np

from ..backend import Tensor
from ..shared.bfloat16 import is_bf16, scalar_bits


#: the reshaped views a tensor keeps (:meth:`CPUTensor.reshape`)
MAX_VIEWS = 8


class CPUTensor(Tensor):
    """A tensor backed by a numpy array (``_ary``); slices and reshapes are numpy views.

    A reshape is made once per shape and kept (at most ``MAX_VIEWS`` per tensor): the same
    tensor reshaped the same way again, as a layer does to its buffers every step, gives the
    same view object, so calls keyed by their operands' identities (the GEMMs' prepared calls)
    find theirs.  A kept view is given again only while this tensor still has the storage it
    was made from (an optimizer arena rebinds parameters' ``_ary``) and the view its own.

    ``kept`` is False for a slice or a transpose (made anew by each ``t[...]`` / ``t.T``, as a
    recurrent layer's time step slices are) and for the reshapes of one: calls keyed by
    identities leave such tensors out rather than fill their tables with them."""

    __slots__ = ("_ary", "backend", "name", "_views", "kept", "bf16")

    def __init__(self, backend, ary, name=None, kept=True):
        self.backend = backend
        self._ary = ary
        self.name = name
        self._views = None
        self.kept = kept
        self.bf16 = ary.dtype.metadata is not None and is_bf16(ary.dtype)

    @property
    def shape(self):
        return self._ary.shape

    @property
    def dtype(self):
        return self._ary.dtype

    @property
    def size(self):
        return self._ary.size

    @property
    def storage(self):
        """``'bf16'`` for bfloat16 storage (the GPU tensor's storage code), else None."""
        return "bf16" if self.bf16 else None

    @property
    def host_dtype(self):
        """The dtype ``get()`` returns (float32 for bfloat16 storage)."""
        return np.dtype(np.float32) if self.bf16 else self._ary.dtype

    def get(self):
        """A host copy (float32 values for bfloat16 storage)."""
        if self.bf16:
            return self.backend.from_bf16(self._ary)
        return self._ary.copy()

    def set(self, ary):
        """Copy host array ``ary`` in (same shape, or same size: reshaped); into bfloat16
        storage its values are rounded to nearest even."""
        ary = np.asarray(ary)
        if ary.shape != self.shape and ary.size != self.size:
            raise ValueError(f"cannot set a tensor of shape {self.shape} from an array of shape "
                             f"{ary.shape}")
        if self.bf16:
            self.backend.to_bf16(ary.reshape(self.shape), out=self._ary)
            return self
        np.copyto(self._ary, ary.reshape(self.shape), casting="unsafe")
        return self

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        views = self._views
        if views is not None:
            kept = views.get(shape)
            if kept is not None and kept[0] is self._ary and kept[1]._ary is kept[2]:
                return kept[1]
        ary = self._ary
        view = ary.reshape(shape)
        if not np.may_share_memory(view, ary):  # a copy is new memory
            raise ValueError(f"reshape of a non-contiguous {self.shape} view to {shape} would copy")
        tensor = CPUTensor(self.backend, view, kept=self.kept)
        if views is None or len(views) >= MAX_VIEWS:
            views = self._views = {}
        views[shape] = (ary, tensor, view)
        return tensor

    @property
    def T(self):
        return CPUTensor(self.backend, self._ary.T, kept=False)

    def __getitem__(self, index):
        return CPUTensor(self.backend, self._ary[_index(index)], kept=False)

    def __setitem__(self, index, value):
        if index.__class__ is slice and index == _WHOLE:  # t[:] = ...: the array itself
            self.backend.evaluate_into(self._ary, value, self.kept)
        else:
            self.backend.evaluate_into(self._ary[_index(index)], value)

    def fill(self, value):
        """Every element = ``value``: a real scalar straight into the array (a bf16 tensor's
        bits rounded once, as ``t[:] = value`` rounds them), without the op table's
        expression; anything else as ``t[:] = value``.  Returns the tensor."""
        if value.__class__ in _PLAIN_REALS or \
                isinstance(value, numbers.Real) and not isinstance(value, bool):
            if self.bf16:
                self._ary.fill(scalar_bits(value))
            elif self._ary.dtype.kind == "f":
                self._ary.fill(value)
            else:
                return super().fill(value)
            return self
        return super().fill(value)

    def __array__(self, dtype=None, copy=None):
        ary = self.get() if self.bf16 else self._ary
        return ary if dtype is None else ary.astype(dtype)


_WHOLE = slice(None)
#: the scalar types ``fill`` takes without asking ``numbers.Real`` (an ABC check costs about as
#: much as the fill of a small gradient; bool's class is not int)
_PLAIN_REALS = (float, int)


def _index(index):
    if isinstance(index, CPUTensor):
        if index.bf16:
            raise TypeError(f"a bfloat16 tensor (shape {index.shape}) cannot index a tensor: "
                            f"its values are not integers; index with an int32 tensor")
        return index._ary
    return index


def all_kept(tensors):
    """True when every tensor of ``tensors`` (None entries aside) is ``kept``: a call on them
    may be kept by their arrays' identities."""
    return all(t.kept for t in tensors if t is not None)


def array_of(t):
    """The numpy array of CPU tensor ``t``."""
    return t._ary


ALIGN_BYTES = 64


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array of ``shape`` whose data starts on a 64-byte boundary
    (a cache line, one AVX-512 vector).  numpy aligns only to 16 bytes; the C kernels' vector
    loads and stores of rows of output channels would then straddle cache lines."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN_BYTES, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN_BYTES
    return raw[start:start + nbytes].view(dtype).reshape(shape)
