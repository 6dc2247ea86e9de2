"""Finiteness checks of parameters, optimizer state and host arrays.

A tensor is finite when it holds no NaN and no +/-inf.  The check is two reductions (min and
max, which propagate NaN and reach an inf) and allocates nothing: the backend runs them
(``Backend.is_finite``: on the CPU over the tensor's own array; elsewhere as ``min``/``max``
op-trees into a one-element work tensor kept per shape, read back as one scalar each).
"""
from .backends.storage import array_is_finite


def tensor_is_finite(tensor, work=None):
    """True when backend tensor ``tensor`` holds no NaN or inf.  ``work``: a dict where the
    one-element reduction buffers of non-CPU backends are kept between calls."""
    return tensor.backend.is_finite(tensor, work)


def first_nonfinite(named, work=None):
    """The first name in ``named`` (an iterable of (name, tensor or host array)) whose values
    are not all finite, else None."""
    for name, value in named:
        finite = tensor_is_finite(value, work) if hasattr(value, "backend") else \
            array_is_finite(value)
        if not finite:
            return name
    return None
