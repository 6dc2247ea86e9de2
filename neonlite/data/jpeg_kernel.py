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
#: libjpeg's colour spaces (J_COLOR_SPACE) of the files the kernel decodes: grayscale, RGB,
#: YCbCr
KERNEL_COLOURS = (1, 2, 3)
#: pixels the rows libjpeg decodes for a box may have beyond it (whole iMCU columns of up to
#: 32 pixels, and one column of margin on each side): rows this much wider than the box let
#: :func:`decode_jpeg_into` decode in place
ROW_SLACK = 33


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
    box = np.ascontiguousarray(box, dtype=np.int32)
    out = np.empty((int(box[2]), int(box[3]), channels), np.uint8)
    found = _decode(module, data, path, box, scale, out, None, max_side, max_pixels)
    return None if found is None else out


def decode_jpeg_into(module, data, path, box, scale, out, max_side, max_pixels):
    """Decode ``box`` as :func:`decode_jpeg` does into ``out``, uint8 (height, W, channels)
    C-contiguous with W at least the box's width, without copying rows where they fit:
    returns the column of ``out`` where the box starts (its pixels are ``out[:, offset:offset
    + width]``, the other columns unspecified; W = width + :data:`ROW_SLACK` lets libjpeg
    write every row in place), or None when the kernel does not take the file."""
    box = np.ascontiguousarray(box, dtype=np.int32)
    if out.dtype != np.uint8 or out.ndim != 3 or not out.flags.c_contiguous or \
            out.shape[0] != int(box[2]) or out.shape[1] < int(box[3]):
        raise ValueError(f"decode_jpeg_into: out must be C-contiguous uint8 ({int(box[2])}, "
                         f">= {int(box[3])}, channels), got {out.shape} {out.dtype}")
    return _decode(module, data, path, box, scale, out, module.ffi.new("int32_t *"), max_side,
                   max_pixels)


def _decode(module, data, path, box, scale, out, offset, max_side, max_pixels):
    """The kernel's call: the box's column in ``out`` (0 without ``offset``), None when the
    kernel does not take the file; DataError (see :func:`decode_jpeg`)."""
    ffi, lib = module.ffi, module.lib
    warnings, message = ffi.new("int32_t *"), ffi.new("char[]", MESSAGE_BYTES)
    code = lib.jroi_decode(ffi.from_buffer(data), len(data), ffi.from_buffer("int32_t[]", box),
                           int(scale), int(out.shape[2]), ffi.from_buffer("uint8_t[]", out),
                           out.shape[1] * out.shape[2], offset if offset is not None else
                           ffi.NULL, max_side, max_pixels, MAX_DECODE_BYTES, MAX_SCANS,
                           warnings, message, MESSAGE_BYTES)
    if code == OK:
        return int(offset[0]) if offset is not None else 0
    if code == UNSUPPORTED:
        return None
    raise _error(code, path, " ".join(ffi.string(message).decode(errors="replace").split()),
                 box, scale)


def jpeg_header(module, data, path):
    """``(height, width, components, takes)`` of the JPEG bytes ``data`` (of file ``path``)
    from its header alone (nothing decoded): ``takes`` False where the kernel hands the file
    to Pillow (CMYK, YCCK or unknown colour, samples other than 8 bits).  DataError naming
    ``path`` when the header cannot be read."""
    ffi = module.ffi
    info, message = np.zeros(6, np.int32), ffi.new("char[]", MESSAGE_BYTES)
    code = module.lib.jroi_header(ffi.from_buffer(data), len(data),
                                  ffi.from_buffer("int32_t[]", info), message, MESSAGE_BYTES)
    if code != OK:
        raise _error(code, path, " ".join(ffi.string(message).decode(errors="replace").split()),
                     None, 1)
    height, width, components, colour, _, precision = (int(v) for v in info)
    return height, width, components, colour in KERNEL_COLOURS and precision == 8


def _error(code, path, words, box, scale):
    """The DataError of the kernel's return ``code`` for file ``path``."""
    if code == TOO_LARGE:
        return DataError(f"{path}: the image is too large to decode ({words}; refused before "
                         f"decoding)")
    if code == OUT_OF_MEMORY:
        return DataError(f"{path}: decoding the image needs more than the "
                         f"{MAX_DECODE_BYTES >> 20:,} MiB of working memory libjpeg may take "
                         f"({words})")
    if code == TOO_MANY_SCANS:
        return DataError(f"{path}: the JPEG file has {words} (refused)")
    if code == BAD_CALL:
        return DataError(f"{path}: cannot decode box {np.asarray(box).tolist()} at 1/{scale} "
                         f"({words})")
    return DataError(f"{path}: corrupt or truncated image ({words})")
