"""A list of augmentation ops applied to batches of uint8 images.

``Pipeline(ops).apply(images, indices, epoch_key, out)`` augments a batch: ``images`` a uint8
(N, H, W, C) array or a list of N uint8 (H_i, W_i, C) arrays of different sizes, ``indices``
(N,) the samples' indices in the data set, ``epoch_key`` the epoch's uint64 key
(:func:`~neonlite.data.augment.draws.epoch_key`), ``out`` a preallocated (N, h, w, c) array
(``out_shape``): uint8, or float32 / float64 when the last op is
:class:`~neonlite.data.augment.colour.Normalize`.  Op number ``k`` draws its numbers from
stream ``k`` of :mod:`~neonlite.data.augment.draws`, so sample ``i`` is augmented the same
whatever batch it is in.

The ops run as the C kernels of :mod:`~neonlite.data.augment.kernels` where they are built
(``use_kernels=False``: always the numpy references, their definition; the results are the
same bits).

A pipeline made with ``train=False`` (or :meth:`Pipeline.evaluation`) evaluates: the
random ops take their deterministic form (a centred crop for :class:`PadCrop` and
:class:`RandomResizedCrop`; :class:`Flip` and :class:`ColorJitter` do nothing), so evaluation
images have the shape training images have.
"""
import numbers

import numpy as np

from ...host_memory import available_bytes, describe_bytes
from ..errors import DataError
from .colour import Normalize
from .draws import sample_uniforms
from .geometry import RandomResizedCrop, Resize
from .kernels import augment_module, run_steps
from .op import AugmentOp

FLOAT_OUTPUTS = (np.dtype(np.float32), np.dtype(np.float64))


class Pipeline:
    """Augmentation ops applied in order (see the module doc); ``train`` False evaluates;
    ``use_kernels`` False runs the numpy references."""

    def __init__(self, ops, train=True, path="augment", use_kernels=True):
        ops = list(ops) if isinstance(ops, (list, tuple)) else ops
        if not isinstance(ops, list):
            raise DataError(f"{path}: expected a list of augmentation ops, got "
                            f"{type(ops).__name__}")
        for i, op in enumerate(ops):
            if not isinstance(op, AugmentOp):
                raise DataError(f"{path}[{i}]: expected an augmentation op (PadCrop, Flip, "
                                f"...), got {type(op).__name__}")
            if isinstance(op, Normalize) and i != len(ops) - 1:
                raise DataError(f"{path}[{i}]: Normalize must be the last op (it turns the "
                                f"uint8 images into floats), but {len(ops) - 1 - i} op(s) "
                                f"follow it")
        self.ops, self.train, self.path = ops, bool(train), path
        self.use_kernels = use_kernels

    def evaluation(self):
        """The same ops, evaluating (deterministic)."""
        return Pipeline(self.ops, train=False, path=self.path, use_kernels=self.use_kernels)

    def _where(self, stream, err):
        """``err`` of op ``stream`` with the op's key path in front."""
        return DataError(f"{self.path}[{stream}]: {err}")

    @property
    def normalizes(self):
        """Whether the output is float (the last op is Normalize)."""
        return bool(self.ops) and isinstance(self.ops[-1], Normalize)

    @property
    def is_random(self):
        """Whether :meth:`apply` draws any random numbers."""
        return self.train and any(op.random for op in self.ops)

    def describe(self):
        """The YAML list of this pipeline's ops."""
        return [op.describe() for op in self.ops]

    def out_shape(self, in_shape_hwc):
        """(h, w, c) of the outputs for inputs of shape (H, W, C); H and W None for images of
        different sizes, which the ops must then bring to one size."""
        shape = _check_in_shape(in_shape_hwc)
        for stream, op in enumerate(self.ops):
            try:
                shape = tuple(op.out_shape(shape, self.train))
            except DataError as err:
                raise self._where(stream, err) from None
        if shape[0] is None or shape[1] is None:
            raise DataError(f"{self.path}: the images have different sizes, so the augmentation "
                            "must end with a fixed size (pad_crop, center_crop or "
                            "random_resized_crop after any resize)")
        return tuple(int(v) for v in shape)

    def check_batch(self, in_shape_hwc, n):
        """A :class:`DataError` now, before any batch, when augmenting ``n`` images of shape
        (H, W, C) would need more memory than this process may still take."""
        shape = _check_in_shape(in_shape_hwc)
        for stream, op in enumerate(self.ops):
            shape = tuple(op.out_shape(shape, self.train))
            if shape[0] is not None and shape[1] is not None:
                self._check_memory(stream, op, np.tile(np.array(shape, np.int64), (n, 1)))

    def out_dtypes(self):
        """The dtypes ``out`` may have."""
        return FLOAT_OUTPUTS if self.normalizes else (np.dtype(np.uint8),)

    def resizes_first(self):
        """Whether the first op this pipeline runs cuts a box and resizes it (Resize or
        RandomResizedCrop), so its images may be decoded at a reduced scale."""
        ops = [op for op in self.ops if self.train or op.evaluates]
        return bool(ops) and isinstance(ops[0], (Resize, RandomResizedCrop))

    def plan(self, shapes, indices, epoch_key):
        """``[(op, params)]``: what :meth:`apply` would draw for images of ``shapes`` (N, 3)
        (before decoding them, from their headers); with :meth:`resizes_first`, the first
        op's ``params["box"]`` (N, 4) may be replaced (images decoded at a reduced scale) and
        the plan given to :meth:`apply`."""
        shapes = np.asarray(shapes, np.int64)
        return self._draw(shapes, shapes, _check_indices(indices, len(shapes)),
                          _check_key(epoch_key))

    def apply(self, images, indices, epoch_key, out, planned=None):
        """Augment the batch into ``out`` in place (see the module doc); returns ``out``.
        ``planned``: the :meth:`plan` of the batch (its first box fitted to the images as
        decoded), else drawn here for the images' shapes."""
        images, shapes = _check_images(images)
        n = len(images)
        indices = _check_indices(indices, n)
        key = _check_key(epoch_key)
        final = self.out_shape((None, None, int(shapes[0, 2])) if _mixed(shapes) else
                               tuple(int(v) for v in shapes[0]))
        _check_out(out, (n,) + final, self.out_dtypes())
        if planned is None:
            planned = self._draw(images, shapes, indices, key)
        module = augment_module() if self.use_kernels else None
        if module is not None:
            target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
            run_steps(module, planned, images, shapes, target,
                      self.ops[-1] if self.normalizes else None)
            if target is not out:
                out[...] = target
            return out
        for op, params in planned:
            images = [op.reference(image, params, i) for i, image in enumerate(images)]
        for i, image in enumerate(images):
            out[i] = self.ops[-1].normalise(image, out.dtype) if self.normalizes else image
        return out

    def _draw(self, images, shapes, indices, key):
        """``[(op, params)]`` of the batch: each op's per-sample parameters (Normalize last,
        without any), drawn for the shapes the ops before it give."""
        n, planned = len(images), []
        for stream, op in enumerate(self.ops):
            if isinstance(op, Normalize):
                break
            if not self.train and not op.evaluates:
                continue
            u = sample_uniforms(key, indices, stream, op.draws) if self.train else \
                np.zeros((n, op.draws))
            try:
                params = op.draw(u, shapes, self.train)
            except DataError as err:
                raise self._where(stream, err) from None
            planned.append((op, params))
            shapes = op.shapes_after(shapes, params)
            self._check_memory(stream, op, shapes)
        return planned

    def _check_memory(self, stream, op, shapes):
        """A :class:`DataError` before any work when op ``stream``'s outputs of ``shapes``
        (twice: a step reads one batch while writing the next) need more memory than this
        process may still take."""
        need = 2.0 * float(np.prod(shapes, axis=1, dtype=np.float64).sum())
        limit = available_bytes()
        if limit and need > limit:
            raise DataError(f"{self.path}[{stream}]: {type(op).__name__} makes images of up to "
                            f"{int(shapes[:, 0].max())}x{int(shapes[:, 1].max())} that need "
                            f"{describe_bytes(need)} for the batch, more than the "
                            f"{describe_bytes(limit)} of memory available")

    def __repr__(self):
        return f"Pipeline({self.ops!r}, train={self.train})"


def _mixed(shapes):
    return bool(np.any(shapes != shapes[0]))


def _check_in_shape(shape):
    ok = isinstance(shape, (tuple, list, np.ndarray)) and len(shape) == 3 and all(
        v is None or (isinstance(v, numbers.Integral) and v >= 1) for v in shape[:2]) and \
        isinstance(shape[2], numbers.Integral) and shape[2] >= 1
    if not ok:
        raise DataError(f"augment: expected an image shape (height, width, channels), got "
                        f"{shape!r}")
    return tuple(None if v is None else int(v) for v in shape)


def _check_images(images):
    """The batch (a uint8 (N, H, W, C) array as it is, or a list of (H, W, C) uint8 arrays)
    and its (N, 3) int64 shapes."""
    if isinstance(images, np.ndarray):
        if images.dtype != np.uint8 or images.ndim != 4:
            raise DataError(f"augment: expected uint8 images (N, H, W, C), got an array of "
                            f"shape {images.shape} dtype {images.dtype}")
        if images.shape[0] == 0:
            raise DataError("augment: the batch is empty")
        shapes = np.tile(np.array(images.shape[1:], np.int64), (images.shape[0], 1))
        listed = images
    elif isinstance(images, (list, tuple)):
        listed = list(images)
        for i, image in enumerate(listed):
            if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3:
                what = f"shape {image.shape} dtype {image.dtype}" if isinstance(
                    image, np.ndarray) else type(image).__name__
                raise DataError(f"augment: image {i} of the batch must be a uint8 (H, W, C) "
                                f"array, got {what}")
        if not listed:
            raise DataError("augment: the batch is empty")
        shapes = np.array([image.shape for image in listed], dtype=np.int64)
    else:
        raise DataError(f"augment: expected a uint8 array (N, H, W, C) or a list of uint8 "
                        f"(H, W, C) arrays, got {type(images).__name__}")
    if np.any(shapes[:, 2] != shapes[0, 2]) or np.any(shapes[:, :2] < 1):
        bad = int(np.flatnonzero((shapes[:, 2] != shapes[0, 2]) |
                                 np.any(shapes[:, :2] < 1, axis=1))[0])
        raise DataError(f"augment: image {bad} of the batch has shape {tuple(shapes[bad])}; "
                        f"every image needs height and width >= 1 and {shapes[0, 2]} channels "
                        f"like image 0")
    return listed, shapes


def _check_indices(indices, n):
    indices = np.asarray(indices)
    if indices.shape != (n,) or indices.dtype.kind not in "ui" or (
            indices.size and indices.min() < 0):
        raise DataError(f"augment: indices must be ({n},) integers >= 0 (one data set index "
                        f"per image), got shape {indices.shape} dtype {indices.dtype}")
    return indices.astype(np.int64)


def _check_key(key):
    if not isinstance(key, (numbers.Integral, np.integer)) or isinstance(key, bool) or \
            not 0 <= int(key) < 2 ** 64:
        raise DataError(f"augment: epoch_key must be an integer in [0, 2**64), got {key!r}")
    return int(key)


def _check_out(out, shape, dtypes):
    if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype not in dtypes or \
            not out.flags.writeable:
        have = f"shape {out.shape} dtype {out.dtype}" if isinstance(out, np.ndarray) else \
            type(out).__name__
        raise DataError(f"augment: out must be a writeable {shape} array of "
                        f"{' or '.join(str(d) for d in dtypes)}, got {have}")
