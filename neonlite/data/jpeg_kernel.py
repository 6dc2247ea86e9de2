"""Region-of-interest JPEG decoding through the C kernel ``kernels/cpu/jpeg/jpeg_roi.c``
(libjpeg-turbo's libjpeg API, linked where the compiler finds ``jpeglib.h`` and ``-ljpeg``):
only a box of the image is decoded (the iMCU columns around it, the rows down to its last),
optionally at a DCT scale of 1/2, 1/4 or 1/8, straight into a numpy array.  Its pixels are
those of a full decode by the same libjpeg cut to the box, bit for bit.

Where the kernel cannot be built (no C compiler, no libjpeg headers or library,
``NEONLITE_CPU_KERNELS=0``) or ``NEONLITE_JPEG_KERNEL=0`` is set, :func:`jpeg_module` is None
and the image decoder uses Pillow; :func:`jpeg_decoder_state` says which decoder is in use
(``neonlite doctor``).
"""
import os

import numpy as np

from ..kernels.build import default_builder
from ..kernels.specs import find
from ..kernels.toolchain import CompileError, CompilerNotFound
from .iterator import DataError

#: the variable that turns the kernel off (``0``): Pillow decodes every JPEG
ENV = "NEONLITE_JPEG_KERNEL"
#: progressive scans one file may have (a real file has about 10; a file of 10^5 empty scans
#: is the known progressive-JPEG denial of service)
MAX_SCANS = 500
#: bytes of working memory libjpeg may take for one image (a progressive 4:4:4 image of the
#: largest size allowed keeps 6 bytes of coefficients per pixel)
MAX_DECODE_BYTES = 6 * (1 << 28) + (64 << 20)
MESSAGE_BYTES = 256
#: the kernel's return codes (``jpeg_roi.h``)
OK, CORRUPT, UNSUPPORTED, TOO_LARGE, TOO_MANY_SCANS, BAD_CALL, OUT_OF_MEMORY = range(7)


def _load():
    """(cffi module or None, why not)."""
    if os.environ.get("NEONLITE_CPU_KERNELS", "").strip() == "0":
        return None, "NEONLITE_CPU_KERNELS=0"
    if os.environ.get(ENV, "").strip() == "0":
        return None, f"{ENV}=0"
    try:
        module = default_builder().load_cpu(find("jpeg_roi"))
    except (CompilerNotFound, CompileError, ImportError, OSError) as err:
        return None, (str(err).splitlines() or [type(err).__name__])[0]
    if module.lib.jroi_version() == 0:
        return None, "jpeglib.h or -ljpeg not found by the C compiler"
    return module, None


def jpeg_module():
    """The cffi module of the region-of-interest JPEG kernel, or None (Pillow decodes)."""
    return _load()[0]


def jpeg_decoder_state():
    """``(kernel in use?, words)``: which decoder reads JPEG files, for ``neonlite doctor``."""
    module, why = _load()
    if module is None:
        return False, f"Pillow (the region-of-interest kernel is off: {why})"
    number = int(module.lib.jroi_version())
    version = f"libjpeg-turbo {number // 1000000}.{number // 1000 % 1000}.{number % 1000}" \
        if number > 1000 else f"libjpeg {number}"
    return True, f"region-of-interest kernel on {version} (Pillow for PNG, CMYK, 12-bit)"


def decode_jpeg(module, data, path, box, scale, channels, max_side, max_pixels):
    """uint8 (height, width, ``channels``) pixels of ``box`` (top, left, height, width, in
    the image decoded at 1/``scale``) of JPEG bytes ``data`` (of file ``path``), or None when
    the kernel does not take the file (CMYK, YCCK, 12-bit: Pillow must decode it).
    DataError naming ``path`` for a corrupt or truncated file, one larger than ``max_side``
    pixels a side or ``max_pixels`` in all (refused before decoding), more than
    :data:`MAX_SCANS` scans, or more than :data:`MAX_DECODE_BYTES` of working memory."""
    ffi, lib = module.ffi, module.lib
    box = np.ascontiguousarray(box, dtype=np.int32)
    out = np.empty((int(box[2]), int(box[3]), channels), np.uint8)
    warnings, message = ffi.new("int32_t *"), ffi.new("char[]", MESSAGE_BYTES)
    code = lib.jroi_decode(ffi.from_buffer(data), len(data), ffi.from_buffer("int32_t[]", box),
                           int(scale), int(channels), ffi.from_buffer("uint8_t[]", out),
                           max_side, max_pixels, MAX_DECODE_BYTES, MAX_SCANS, warnings, message,
                           MESSAGE_BYTES)
    if code == OK:
        return out
    if code == UNSUPPORTED:
        return None
    words = " ".join(ffi.string(message).decode(errors="replace").split())
    if code == TOO_LARGE:
        raise DataError(f"{path}: the image is too large to decode ({words}; refused before "
                        f"decoding)")
    if code == OUT_OF_MEMORY:
        raise DataError(f"{path}: decoding the image needs more than the "
                        f"{MAX_DECODE_BYTES >> 20:,} MiB of working memory libjpeg may take "
                        f"({words})")
    if code == TOO_MANY_SCANS:
        raise DataError(f"{path}: the JPEG file has {words} (refused)")
    if code == BAD_CALL:
        raise DataError(f"{path}: cannot decode box {box.tolist()} at 1/{scale} ({words})")
    raise DataError(f"{path}: corrupt or truncated image ({words})")
