"""Bilinear resampling of a crop box, as Pillow's ``Image.crop(box).resize(size, BILINEAR)``.

The filter is the triangle ``max(0, 1 - |x|)``, widened by the scale when shrinking (so a
downscale averages, as Pillow and torchvision's ``antialias=True`` do).  Output pixel ``o`` of a
box of ``length`` input pixels resized to ``out`` has its centre at ``c = (o + 0.5) * s``
(``s = length / out``, box coordinates) and the taps ``first .. first + count - 1`` with
``first = max(int(c - r + 0.5), 0)``, ``count = min(int(c + r + 0.5), length) - first``,
``r = max(s, 1)``, of weights ``filter((first + k - c + 0.5) / max(s, 1))``, normalised to sum
1 (summed in tap order) and stored as 22-bit fixed point (``int(w * 2**22 + 0.5)``).  A pass
sums ``pixel * weight`` in integers from ``2**21`` and keeps ``sum >> 22`` clipped to
[0, 255]; the horizontal pass runs first, into uint8, then the vertical one.  Integer
arithmetic: the C kernels give the same bits from the same tables.
"""
import numpy as np

PRECISION_BITS = 22


def bilinear_taps(length, out):
    """Tap tables of boxes of ``length`` (N,) input pixels resized to ``out`` pixels:
    ``first`` (N, out) int32 (box coordinates) and ``weights`` (N, out, K) int32 (22-bit
    fixed point; K the batch's largest tap count, unused taps 0)."""
    length = np.asarray(length, dtype=np.float64).reshape(-1, 1)
    scale = length / out
    filterscale = np.maximum(scale, 1.0)
    support = filterscale
    ntaps = int(np.ceil(support.max())) * 2 + 1 if length.size else 1
    centre = (np.arange(out, dtype=np.float64) + 0.5) * scale
    first = np.maximum((centre - support + 0.5).astype(np.int64), 0)
    last = np.minimum((centre + support + 0.5).astype(np.int64), length.astype(np.int64))
    count = last - first
    taps = np.zeros(first.shape + (ntaps,))
    total = np.zeros(first.shape)
    for k in range(ntaps):
        w = 1.0 - np.abs((first + k - centre + 0.5) / filterscale)
        w = np.where((k < count) & (w > 0.0), w, 0.0)
        taps[..., k] = w
        total += w
    taps = np.where(total[..., None] != 0.0, taps / np.where(total == 0.0, 1.0, total)[..., None],
                    taps)
    fixed = (taps * float(1 << PRECISION_BITS) + 0.5).astype(np.int64)
    return first.astype(np.int32), fixed.astype(np.int32)


def _pass(values, first, weights, axis):
    """One pass over ``axis`` of uint8 ``values`` with one box's tables (out,), (out, K)."""
    moved = np.moveaxis(values, axis, 0).astype(np.int64)
    length = moved.shape[0]
    acc = np.full((first.shape[0],) + moved.shape[1:], 1 << (PRECISION_BITS - 1), np.int64)
    for k in range(weights.shape[1]):
        src = np.minimum(first + k, length - 1)
        acc += moved[src] * weights[:, k].reshape((-1,) + (1,) * (moved.ndim - 1))
    out = np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize_box(image, box, size, tables=None):
    """uint8 ``image`` (H, W, C) cut to ``box`` (top, left, height, width) and resized to
    ``size`` (h, w) bilinearly (the module's definition).  ``tables``: this box's
    ``(first_y, weights_y, first_x, weights_x)`` when already made."""
    top, left, height, width = (int(v) for v in box)
    if tables is None:
        fy, wy = bilinear_taps([height], size[0])
        fx, wx = bilinear_taps([width], size[1])
        tables = fy[0], wy[0], fx[0], wx[0]
    fy, wy, fx, wx = tables
    crop = image[top:top + height, left:left + width]
    return _pass(_pass(crop, fx, wx, axis=1), fy, wy, axis=0)
