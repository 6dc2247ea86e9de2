"""The geometric ops: pad + random crop, flip, random-resized crop, resize, centre crop.

Crop boxes are (top, left, height, width) in the input image's pixels; a box of
:class:`PadCrop` may reach ``pad`` pixels outside the image, where it reads ``fill``.
"""
import math

import numpy as np

from ..errors import DataError
from .draws import below
from .op import AugmentOp, check_number, check_range, check_size
from .resample import resize_box


def _known(shape):
    return shape[0] is not None and shape[1] is not None


def _first_smaller(shapes, least):
    """The first sample whose (H, W) is below ``least`` (h, w) in either axis, or None."""
    bad = np.flatnonzero(np.any(shapes[:, :2] < least, axis=1))
    return int(bad[0]) if bad.size else None


class PadCrop(AugmentOp):
    """Pad by ``pad`` pixels of value ``fill`` on every side, then crop ``size`` (an int or
    [h, w]) at a random place (the centre when evaluating); CIFAR's pad-4 crop."""

    draws, random, yaml_name = 2, True, "pad_crop"

    def __init__(self, size, pad=0, fill=0):
        self.size = check_size("size", size, "PadCrop")
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
            raise DataError(f"PadCrop: pad must be an integer >= 0, got {pad!r}")
        if not isinstance(fill, int) or isinstance(fill, bool) or not 0 <= fill <= 255:
            raise DataError(f"PadCrop: fill must be an integer in [0, 255], got {fill!r}")
        self.pad, self.fill = pad, fill
        self._config = {"size": list(self.size), "pad": pad, "fill": fill}

    def _check(self, height, width, where=""):
        for axis, have, want in (("height", height, self.size[0]), ("width", width, self.size[1])):
            if want > have + 2 * self.pad:
                raise DataError(f"PadCrop: crop {axis} size={want} is larger than the padded "
                                f"image{where} ({have} + 2 * pad={self.pad} = "
                                f"{have + 2 * self.pad}); lower size or raise pad")

    def out_shape(self, shape, train=True):
        if _known(shape):
            self._check(shape[0], shape[1])
        return self.size + (shape[2],)

    def draw(self, u, shapes, train=True):
        i = _first_smaller(shapes, np.array(self.size) - 2 * self.pad)
        if i is not None:
            self._check(shapes[i, 0], shapes[i, 1], f" of sample {i} ({shapes[i, 0]}x"
                                                    f"{shapes[i, 1]})")
        room_y = shapes[:, 0] + 2 * self.pad - self.size[0]
        room_x = shapes[:, 1] + 2 * self.pad - self.size[1]
        if train:
            top, left = below(u[:, 0], room_y + 1), below(u[:, 1], room_x + 1)
        else:
            top, left = room_y // 2, room_x // 2
        return {"top": top - self.pad, "left": left - self.pad}

    def shapes_after(self, shapes, params):
        out = shapes.copy()
        out[:, :2] = self.size
        return out

    def reference(self, image, params, i):
        top, left = int(params["top"][i]), int(params["left"][i])
        h, w = self.size
        out = np.full((h, w, image.shape[2]), self.fill, dtype=np.uint8)
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + h, image.shape[0]), min(left + w, image.shape[1])
        if y1 > y0 and x1 > x0:
            out[y0 - top:y1 - top, x0 - left:x1 - left] = image[y0:y1, x0:x1]
        return out


class Flip(AugmentOp):
    """Mirror left-right with probability ``p`` (never when evaluating)."""

    draws, random, yaml_name = 1, True, "flip"

    def __init__(self, p=0.5):
        self.p = check_number("p", p, "Flip", 0.0, 1.0)
        self._config = {"p": self.p}

    def draw(self, u, shapes, train=True):
        return {"flip": (u[:, 0] < self.p) if train else np.zeros(len(shapes), dtype=bool)}

    def reference(self, image, params, i):
        return image[:, ::-1] if params["flip"][i] else image


class CenterCrop(AugmentOp):
    """Crop ``size`` (an int or [h, w]) from the middle of the image (top
    ``round((H - h) / 2)``, as torchvision); deterministic."""

    yaml_name = "center_crop"

    def __init__(self, size):
        self.size = check_size("size", size, "CenterCrop")
        self._config = {"size": list(self.size)}

    def _check(self, height, width, where=""):
        if self.size[0] > height or self.size[1] > width:
            raise DataError(f"CenterCrop: size={list(self.size)} is larger than the image"
                            f"{where} ({height}x{width}); resize first or lower size")

    def out_shape(self, shape, train=True):
        if _known(shape):
            self._check(shape[0], shape[1])
        return self.size + (shape[2],)

    def draw(self, u, shapes, train=True):
        i = _first_smaller(shapes, np.array(self.size))
        if i is not None:
            self._check(shapes[i, 0], shapes[i, 1], f" of sample {i}")
        return {"top": np.round((shapes[:, 0] - self.size[0]) / 2.0).astype(np.int64),
                "left": np.round((shapes[:, 1] - self.size[1]) / 2.0).astype(np.int64)}

    def shapes_after(self, shapes, params):
        out = shapes.copy()
        out[:, :2] = self.size
        return out

    def reference(self, image, params, i):
        top, left = int(params["top"][i]), int(params["left"][i])
        return image[top:top + self.size[0], left:left + self.size[1]]


class Resize(AugmentOp):
    """Resize bilinearly so the shorter side is ``shorter_side`` pixels (the longer one
    ``int(shorter_side * long / short)``, as torchvision); deterministic."""

    yaml_name = "resize"

    def __init__(self, shorter_side):
        if not isinstance(shorter_side, int) or isinstance(shorter_side, bool) or \
                shorter_side < 1:
            raise DataError(f"Resize: shorter_side must be an integer >= 1, got "
                            f"{shorter_side!r}")
        self.shorter_side = shorter_side
        self._config = {"shorter_side": shorter_side}

    def sizes(self, heights, widths):
        """(h, w) int64 arrays of the outputs of inputs ``heights`` x ``widths``."""
        s = self.shorter_side
        heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
        tall = heights > widths
        return (np.where(tall, (s * heights) // widths, s),
                np.where(tall, s, (s * widths) // heights))

    def out_shape(self, shape, train=True):
        if not _known(shape):
            return (None, None, shape[2])
        h, w = self.sizes(shape[0], shape[1])
        return int(h), int(w), shape[2]

    def draw(self, u, shapes, train=True):
        h, w = self.sizes(shapes[:, 0], shapes[:, 1])
        return {"box": np.stack([np.zeros_like(h), np.zeros_like(h), shapes[:, 0], shapes[:, 1]],
                                axis=1), "out": np.stack([h, w], axis=1)}

    def shapes_after(self, shapes, params):
        return np.concatenate([np.asarray(params["out"], np.int64), shapes[:, 2:]], axis=1)

    def reference(self, image, params, i):
        return resize_box(image, params["box"][i], tuple(params["out"][i]))


class RandomResizedCrop(AugmentOp):
    """Crop a random box of ``scale`` (fraction of the area) and ``ratio`` (width / height)
    ranges and resize it bilinearly to ``size``, as torchvision's (10 tries, then the
    central box).  When evaluating: the central box of the output's aspect covering
    ``eval_crop`` of the image's extent, resized to ``size``."""

    draws, random, yaml_name = 22, True, "random_resized_crop"
    tries = 10

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), eval_crop=0.875):
        self.size = check_size("size", size, "RandomResizedCrop")
        self.scale = check_range("scale", scale, "RandomResizedCrop", 0.0, 1.0)
        self.ratio = check_range("ratio", ratio, "RandomResizedCrop", 0.0)
        self.eval_crop = check_number("eval_crop", eval_crop, "RandomResizedCrop", 0.0, 1.0,
                                      low_open=True)
        self._config = {"size": list(self.size), "scale": list(self.scale),
                        "ratio": list(self.ratio), "eval_crop": self.eval_crop}

    def out_shape(self, shape, train=True):
        return self.size + (shape[2],)

    def boxes(self, u, heights, widths):
        """(N, 4) int64 boxes (top, left, height, width) of training draws ``u`` (N, 22)."""
        heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
        area = (heights * widths).astype(np.float64)
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        box_h, box_w = heights.copy(), widths.copy()
        in_ratio = widths / heights
        narrow, wide = in_ratio < self.ratio[0], in_ratio > self.ratio[1]
        box_w = np.where(narrow, widths, np.where(wide, np.round(heights * self.ratio[1]),
                                                  widths)).astype(np.int64)
        box_h = np.where(narrow, np.round(widths / self.ratio[0]), heights).astype(np.int64)
        found = np.zeros(len(heights), dtype=bool)
        for t in range(self.tries):
            target = area * (self.scale[0] + u[:, 2 * t] * (self.scale[1] - self.scale[0]))
            aspect = np.exp(lo + u[:, 2 * t + 1] * (hi - lo))
            w = np.round(np.sqrt(target * aspect)).astype(np.int64)
            h = np.round(np.sqrt(target / aspect)).astype(np.int64)
            fits = ~found & (w > 0) & (w <= widths) & (h > 0) & (h <= heights)
            box_h, box_w = np.where(fits, h, box_h), np.where(fits, w, box_w)
            found |= fits
        top = np.where(found, below(u[:, 20], heights - box_h + 1), (heights - box_h) // 2)
        left = np.where(found, below(u[:, 21], widths - box_w + 1), (widths - box_w) // 2)
        return np.stack([top, left, box_h, box_w], axis=1)

    def eval_boxes(self, heights, widths):
        """(N, 4) boxes of evaluation: the centred box of aspect size[1] / size[0]."""
        heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
        aspect = self.size[1] / self.size[0]
        fit_h = np.minimum(heights, widths / aspect)
        box_h = np.maximum(np.round(fit_h * self.eval_crop), 1).astype(np.int64)
        box_w = np.clip(np.round(fit_h * aspect * self.eval_crop), 1, widths).astype(np.int64)
        box_h = np.minimum(box_h, heights)
        return np.stack([(heights - box_h) // 2, (widths - box_w) // 2, box_h, box_w], axis=1)

    def draw(self, u, shapes, train=True):
        box = self.boxes(u, shapes[:, 0], shapes[:, 1]) if train else \
            self.eval_boxes(shapes[:, 0], shapes[:, 1])
        return {"box": box, "out": np.tile(np.array(self.size, np.int64), (len(shapes), 1))}

    def shapes_after(self, shapes, params):
        return np.concatenate([np.asarray(params["out"], np.int64), shapes[:, 2:]], axis=1)

    def reference(self, image, params, i):
        return resize_box(image, params["box"][i], self.size)
