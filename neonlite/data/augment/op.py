"""What every augmentation op is: its random draws, its output shape, and its numpy reference.

An op sees one batch at a time.  ``draw(u, shapes)`` turns the batch's uniforms ``u`` (N,
``draws``) (from :mod:`.draws`) and the input shapes ``shapes`` (N, 3) int64 (H, W, C of each
sample) into the per-sample parameters of the batch: a dict of (N, ...) arrays (crop boxes,
flips, factors).  ``reference(image, params, i)`` applies them to sample ``i``, a uint8
(H, W, C) array, in numpy: that is the op's definition, which the C kernels reproduce.
``evaluating`` ops are the deterministic form an op takes when a pipeline evaluates (see
:class:`~neonlite.data.augment.pipeline.Pipeline`).
"""
import numbers

import numpy as np

from ..errors import DataError


class AugmentOp:
    """Base class of augmentation ops (see the module doc)."""

    draws = 0           # uniforms per sample when training
    random = False      # whether training draws anything
    yaml_name = None    # the op's ``type`` in YAML

    def out_shape(self, shape, train=True):
        """(h, w, c) of a (H, W, C) input; H and W may be None (images of different sizes).
        A :class:`DataError` when the op cannot take that input."""
        return tuple(shape)

    def draw(self, u, shapes, train=True):
        """The batch's per-sample parameters (see the module doc)."""
        return {}

    def shapes_after(self, shapes, params):
        """(N, 3) int64 shapes of the outputs of inputs ``shapes`` with ``params``."""
        return shapes

    def reference(self, image, params, i):
        """Sample ``i`` (uint8 (H, W, C)) with its parameters applied, in numpy."""
        return image

    def describe(self):
        """``{type, config}`` of this op, as YAML writes it."""
        return {"type": self.yaml_name, "config": dict(self._config)}

    def __repr__(self):
        options = ", ".join(f"{k}={v!r}" for k, v in self._config.items())
        return f"{type(self).__name__}({options})"


def check_size(name, value, op):
    """``value`` (an int or an [h, w] pair of ints >= 1) as an (h, w) tuple."""
    pair = [value, value] if isinstance(value, numbers.Integral) and not isinstance(
        value, bool) else value
    if (not isinstance(pair, (list, tuple)) or len(pair) != 2 or
            not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1
                    for v in pair)):
        raise DataError(f"{op}: {name} must be an integer >= 1 or an [height, width] pair of "
                        f"them, got {value!r}")
    return int(pair[0]), int(pair[1])


def check_number(name, value, op, low, high=None, low_open=False):
    """``value`` as a float, checked to lie in [low, high] (``(low, high]`` with
    ``low_open``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        np.isfinite(value) and (value > low if low_open else value >= low) and \
        (high is None or value <= high)
    if not ok:
        where = f"{'>' if low_open else '>='} {low}" + ("" if high is None else f" and <= {high}")
        raise DataError(f"{op}: {name} must be a number {where}, got {value!r}")
    return float(value)


def check_range(name, value, op, low, high=None):
    """``value`` as a (lo, hi) pair of finite numbers with low < lo <= hi (<= high)."""
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and np.isfinite(v)
        for v in value)
    if ok:
        lo, hi = float(value[0]), float(value[1])
        ok = low < lo <= hi and (high is None or hi <= high)
    if not ok:
        bound = f"{low} < lo <= hi" + ("" if high is None else f" <= {high}")
        raise DataError(f"{op}: {name} must be a [lo, hi] pair with {bound}, got {value!r}")
    return lo, hi
