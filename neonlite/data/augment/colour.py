"""The photometric ops: colour jitter on uint8, and the uint8 -> float normalisation.

:class:`ColorJitter` draws, per sample, a brightness, a contrast and a saturation factor, each
uniform in ``[max(0, 1 - v), 1 + v]``, and applies them in that order, each step in float32
and rounded (half to even) and clipped back to uint8:

- brightness ``x * b``;
- contrast ``x * c + (1 - c) * m``, ``m`` the float32 mean of the image's grey levels;
- saturation ``x * s + (1 - s) * g``, ``g`` the pixel's grey level.

Grey is ``(299 r + 587 g + 114 b + 500) // 1000`` (integers), the pixel itself for one
channel.
"""
import numbers

import numpy as np

from ..errors import DataError
from .op import AugmentOp, check_number


def grey(image):
    """int64 (H, W) grey levels of a uint8 (H, W, C) image (C 1 or 3)."""
    if image.shape[2] == 1:
        return image[..., 0].astype(np.int64)
    rgb = image.astype(np.int64)
    return (299 * rgb[..., 0] + 587 * rgb[..., 1] + 114 * rgb[..., 2] + 500) // 1000


def to_uint8(values):
    """float32 values rounded half to even and clipped to [0, 255], as uint8."""
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


class ColorJitter(AugmentOp):
    """Random brightness, contrast and saturation (each a factor in [1 - v, 1 + v]) of
    uint8 images (RGB, or one channel without saturation); never when evaluating."""

    draws, random, yaml_name = 3, True, "color_jitter"

    def __init__(self, brightness=0.0, contrast=0.0, saturation=0.0):
        self.amounts = tuple(check_number(name, value, "ColorJitter", 0.0) for name, value in
                             (("brightness", brightness), ("contrast", contrast),
                              ("saturation", saturation)))
        self._config = dict(zip(("brightness", "contrast", "saturation"), self.amounts))

    def out_shape(self, shape, train=True):
        if shape[2] not in (1, 3) and any(self.amounts[1:]):
            raise DataError(f"ColorJitter: contrast and saturation need 1 or 3 channels, the "
                            f"images have {shape[2]}")
        if shape[2] == 1 and self.amounts[2]:
            raise DataError("ColorJitter: saturation needs 3 (RGB) channels, the images have 1")
        return tuple(shape)

    def draw(self, u, shapes, train=True):
        lo = np.array([max(0.0, 1.0 - a) for a in self.amounts])
        hi = np.array([1.0 + a for a in self.amounts])
        factors = (lo + u[:, :3] * (hi - lo)).astype(np.float32)
        if not train:
            factors = np.ones((len(shapes), 3), np.float32)
        return {"factors": factors}

    def reference(self, image, params, i):
        b, c, s = (np.float32(f) for f in params["factors"][i])
        one = np.float32(1.0)
        out = image
        if b != one:
            out = to_uint8(out.astype(np.float32) * b)
        if c != one:
            mean = np.float32(grey(out).sum() / (out.shape[0] * out.shape[1]))
            out = to_uint8(out.astype(np.float32) * c + (one - c) * mean)
        if s != one:
            g = grey(out).astype(np.float32)[..., None]
            out = to_uint8(out.astype(np.float32) * s + (one - s) * g)
        return out


class Normalize(AugmentOp):
    """uint8 -> float ``(x / 255 - mean) / std`` per channel (``mean`` and ``std`` numbers,
    or lists of one per channel, on the [0, 1] scale); the last op of a pipeline, fused
    into its output."""

    yaml_name = "normalize"

    def __init__(self, mean=0.0, std=1.0):
        self.mean = self._values("mean", mean, lambda v: True)
        self.std = self._values("std", std, lambda v: v > 0)
        self._config = {"mean": list(self.mean), "std": list(self.std)}

    @staticmethod
    def _values(name, value, ok):
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not values or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and
                                 np.isfinite(v) and ok(v) for v in values):
            what = "finite numbers > 0" if name == "std" else "finite numbers"
            raise DataError(f"Normalize: {name} must be a number or a list of {what}, one per "
                            f"channel, got {value!r}")
        return tuple(float(v) for v in values)

    def out_shape(self, shape, train=True):
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, shape[2]):
                raise DataError(f"Normalize: {name} has {len(values)} values but the images "
                                f"have {shape[2]} channels (give one value, or one per "
                                f"channel)")
        return tuple(shape)

    def scale_shift(self, channels, dtype):
        """(scale, shift) (channels,) of ``dtype``: the output is ``x * scale + shift``."""
        mean = np.broadcast_to(np.array(self.mean), (channels,))
        std = np.broadcast_to(np.array(self.std), (channels,))
        return (1.0 / (255.0 * std)).astype(dtype), (-mean / std).astype(dtype)

    def normalise(self, image, dtype):
        """uint8 (H, W, C) ``image`` as ``dtype`` ``x * scale + shift``."""
        scale, shift = self.scale_shift(image.shape[2], dtype)
        return image.astype(dtype) * scale + shift
