"""Finiteness checks of parameters, optimizer state and host arrays.

A tensor is finite when it holds no NaN and no +/-inf.  The check is two reductions (min and
max, which propagate NaN and reach an inf) and allocates nothing: on the CPU backend they run
on the tensor's numpy array; on any other backend they run as the backend's ``min``/``max``
op-trees into a one-element work tensor kept per shape, read back as one scalar each.
"""
import math

import numpy as np


def array_is_finite(ary):
    """True when the host array ``ary`` (any shape, float or integer) holds no NaN or inf."""
    ary = np.asarray(ary)
    if ary.size == 0 or not np.issubdtype(ary.dtype, np.inexact):
        return True
    return math.isfinite(float(ary.min())) and math.isfinite(float(ary.max()))


def tensor_is_finite(tensor, work=None):
    """True when backend tensor ``tensor`` holds no NaN or inf.  ``work``: a dict where the
    one-element reduction buffers of non-CPU backends are kept between calls."""
    ary = getattr(tensor, "_ary", None)
    if ary is not None:
        return array_is_finite(ary)
    be = tensor.backend
    key = (tensor.ndim, np.dtype(tensor.dtype).str)
    cache = work if work is not None else {}
    if key not in cache:
        cache[key] = be.zeros((1,) * tensor.ndim, dtype=tensor.dtype)
    out = cache[key]
    for reduce in (be.max, be.min):
        out[:] = reduce(tensor)
        if not math.isfinite(float(out.get().ravel()[0])):
            return False
    return True


def first_nonfinite(named, work=None):
    """The first name in ``named`` (an iterable of (name, tensor or host array)) whose values
    are not all finite, else None."""
    for name, value in named:
        finite = tensor_is_finite(value, work) if hasattr(value, "backend") else \
            array_is_finite(value)
        if not finite:
            return name
    return None
