"""The ops of a pipeline run as the C kernels of ``kernels/cpu/augment.c`` (the uint8 variant
``augment_u8``), one call per op per batch, with the per-sample parameters the ops drew.

A :class:`Flip` right after a crop or resize is fused into it (written mirrored; the resize
makes its tap tables itself, mirrored), and the :class:`Normalize` at the end is fused into
the last kernel's stores.  The results are those
of the ops' numpy ``reference`` bit for bit (the tests check it).  :func:`augment_module` is
None where the kernels cannot be built (no C compiler, ``NEONLITE_CPU_KERNELS=0``): the
pipeline then runs the numpy references.
"""
import functools
import os

import numpy as np

from ...kernels.build import default_builder
from ...kernels.cpu_features import byte_vector_level
from ...kernels.specs import cpu_variant
from ...kernels.toolchain import CompileError, CompilerNotFound
from .colour import ColorJitter, Normalize
from .geometry import CenterCrop, Flip, PadCrop, RandomResizedCrop, Resize

OUT_KINDS = {np.dtype(np.uint8): 0, np.dtype(np.float32): 1, np.dtype(np.float64): 2}


@functools.lru_cache(maxsize=None)
def augment_module():
    """The cffi module of the augmentation kernels, or None (then numpy runs)."""
    if os.environ.get("NEONLITE_CPU_KERNELS", "").strip() == "0":
        return None
    try:
        return default_builder().load_cpu(cpu_variant("augment", np.uint8))
    except (CompilerNotFound, CompileError, ImportError, OSError):
        return None


class Batch:
    """A batch of uint8 images as the kernels see it: one pointer per sample and the (N, 2)
    int32 heights and widths; the arrays it points into are kept alive with it."""

    def __init__(self, ffi, images, shapes):
        self.ffi, self.shapes, self.channels = ffi, shapes, int(shapes[0, 2])
        self.hw = np.ascontiguousarray(shapes[:, :2], dtype=np.int32)
        self.arrays = np.ascontiguousarray(images) if isinstance(images, np.ndarray) else \
            [np.ascontiguousarray(image) for image in images]
        self.pointers = pointer_array(ffi, "uint8_t *[]", self.arrays)


def pointer_array(ffi, ctype, arrays):
    """A cffi array of pointers to the first element of each of ``arrays`` (an (N, ...)
    C-contiguous array, whose rows are pointed at, or a list of C-contiguous arrays)."""
    n = len(arrays)
    pointers = ffi.new(ctype, n)
    if isinstance(arrays, np.ndarray):
        base = ffi.cast("uint8_t *", ffi.from_buffer(arrays))
        step = arrays.strides[0]
        for i in range(n):
            pointers[i] = base + i * step
    else:
        for i, array in enumerate(arrays):
            pointers[i] = ffi.cast("uint8_t *", ffi.from_buffer(array))
    return pointers


def _outputs(shapes_hw, channels, final):
    """The output of one step: ``final`` (the pipeline's ``out``) or new uint8 images of
    heights and widths ``shapes_hw`` (N, 2), one array when they are all one size."""
    if final is not None:
        return final
    if np.all(shapes_hw == shapes_hw[0]):
        return np.empty((len(shapes_hw), int(shapes_hw[0, 0]), int(shapes_hw[0, 1]), channels),
                        np.uint8)
    return [np.empty((int(h), int(w), channels), np.uint8) for h, w in shapes_hw]


def run_steps(module, planned, images, shapes, out, normalize):
    """Run ``planned`` ((op, params) pairs, in order) on ``images`` (a uint8 (N, H, W, C)
    array or list) of ``shapes`` (N, 3), the last step writing ``out`` (normalised by
    ``normalize``, the pipeline's Normalize, when given)."""
    ffi = module.ffi
    n, channels = len(shapes), int(shapes[0, 2])
    scale, shift = normalize.scale_shift(channels, np.float64) if normalize else \
        (np.ones(channels), np.zeros(channels))
    stores = (ffi.from_buffer("double[]", scale), ffi.from_buffer("double[]", shift))
    steps = _fuse_flips([(op, params) for op, params in planned
                         if not isinstance(op, Normalize)]) or [(None, {}, np.zeros(n, bool))]
    for s, (op, params, flip) in enumerate(steps):
        last = s == len(steps) - 1
        if isinstance(op, (Resize, RandomResizedCrop)):
            hw = np.asarray(params["out"], np.int64)
        elif isinstance(op, (PadCrop, CenterCrop)):
            hw = np.tile(np.array(op.size, np.int64), (n, 1))
        else:
            hw = shapes[:, :2]
        dst = _outputs(hw, channels, out if last else None)
        call = Call(ffi, Batch(ffi, images, shapes), dst, hw, flip,
                    OUT_KINDS[out.dtype] if last else 0, stores)
        if isinstance(op, (Resize, RandomResizedCrop)):
            failed = call.resize(module.lib, params["box"])
        elif isinstance(op, ColorJitter):
            failed = call.jitter(module.lib, params["factors"])
        else:
            failed = call.crop(module.lib, params.get("top", np.zeros(n, np.int64)),
                               params.get("left", np.zeros(n, np.int64)),
                               op.fill if isinstance(op, PadCrop) else 0)
        if failed:
            raise MemoryError(f"augment: the kernels could not allocate the row buffers of "
                              f"{failed} sample(s)")
        images = dst
        shapes = np.concatenate([hw, np.full((n, 1), channels, np.int64)], axis=1)
    return out


class Call:
    """The arguments every kernel takes for one step: the source :class:`Batch`, the outputs
    ``dst`` of heights and widths ``hw`` (N, 2), the flips (N,), the output kind and the
    (scale, shift) of the stores."""

    def __init__(self, ffi, src, dst, hw, flip, kind, stores):
        self.ffi, self.src, self.n, self.hw = ffi, src, len(hw), np.asarray(hw)
        self.dst = pointer_array(ffi, "void *[]", dst)
        self.dst_hw = self.i32(hw)
        self.flip = ffi.from_buffer("uint8_t[]", np.ascontiguousarray(flip, np.uint8))
        self.kind, self.stores = kind, stores

    def i32(self, array):
        """``array`` as a C int32 array (the cdata keeps the converted copy alive)."""
        return self.ffi.from_buffer("int32_t[]", np.ascontiguousarray(array, np.int32))

    def crop(self, lib, top, left, fill):
        src = self.src
        return lib.aug_crop(src.pointers, self.i32(src.hw), self.dst, self.dst_hw, self.n,
                            src.channels, self.i32(top), self.i32(left), self.flip, fill,
                            self.kind, *self.stores)

    def resize(self, lib, box):
        src = self.src
        return lib.aug_resize(src.pointers, self.i32(src.hw), self.dst, self.dst_hw, self.n,
                              src.channels, self.i32(box), self.flip, self.kind, *self.stores,
                              byte_vector_level())

    def jitter(self, lib, factors):
        src = self.src
        factors = self.ffi.from_buffer("float[]", np.ascontiguousarray(factors, np.float32))
        return lib.aug_jitter(src.pointers, self.i32(src.hw), self.dst, self.n, src.channels,
                              factors, self.kind, *self.stores)


def _fuse_flips(planned):
    """``(op, params, flip (N,) bool)`` steps: a Flip joins the crop or resize just before it
    (one that has no Flip joined yet); any other Flip is a step of its own (a crop of the
    whole image, mirrored)."""
    steps, joined = [], False
    for op, params in planned:
        n = len(next(iter(params.values())))
        if isinstance(op, Flip):
            if steps and not joined and isinstance(steps[-1][0], GEOMETRIC):
                steps[-1] = (steps[-1][0], steps[-1][1], params["flip"])
                joined = True
                continue
            steps.append((op, {}, params["flip"]))
        else:
            steps.append((op, params, np.zeros(n, bool)))
        joined = False
    return steps


GEOMETRIC = (PadCrop, CenterCrop, Resize, RandomResizedCrop)
