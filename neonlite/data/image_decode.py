"""Decoding one PNG or JPEG file into a uint8 (H, W, C) array with Pillow, bounded: the file
must be a regular file no larger than :data:`MAX_FILE_BYTES`, its header's dimensions are
checked (each side at most :data:`MAX_SIDE`, at most :data:`MAX_PIXELS` pixels) before any
pixel is decoded, and Pillow's own decompression-bomb limit is set to the same bound.

JPEG files are decoded by the region-of-interest kernel of :mod:`.jpeg_kernel` where it is
built (libjpeg-turbo), else by Pillow (and PNG, CMYK and 12-bit JPEG files always are); a
JPEG the kernel takes is read once, its header parsed by libjpeg (Pillow never opens it).  A
JPEG that will be cut to a box (:meth:`Decoder.decode_box`) has only the box decoded by the
kernel, its pixels those of a full decode cut to the box, bit for bit, written by libjpeg
straight into the rows it returns (no copy).  A box that is shrunk
by 2x or more may be decoded at a reduced scale (libjpeg's DCT scaling, in the kernel or
through Pillow's ``Image.draft``, as DALI- and ffcv-style loaders decode): the largest of 1/2,
1/4, 1/8 that leaves the box at least the output's size, the box mapped into the smaller
image.  Those pixels differ a little from a full decode's (see docs/data.md);
``jpeg_draft=False`` decodes at full scale.

Pillow is an optional dependency (``pip install neonlite[images]``); it is imported when an
image data set is made, and its absence is one line saying how to install it.
"""
import io
import warnings

import numpy as np

from ..safe_files import open_regular
from .iterator import DataError
from .jpeg_kernel import ROW_SLACK, decode_jpeg_into, jpeg_header, jpeg_module

#: the most pixels one image may have (a 16k x 16k photo; a decompression bomb is refused)
MAX_PIXELS = 1 << 28
#: the longest side one image may have
MAX_SIDE = 1 << 16
#: the largest image file read (bytes)
MAX_FILE_BYTES = 1 << 30
FORMATS = ("PNG", "JPEG")
#: the first bytes of every JPEG file (start of image, then a marker)
JPEG_START = b"\xff\xd8\xff"


def pillow():
    """The ``PIL.Image`` module, its decompression-bomb limit set to :data:`MAX_PIXELS`;
    DataError when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("image data sets need Pillow: pip install 'neonlite[images]' (or "
                        "pip install Pillow)") from None
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    return Image


class Decoder:
    """Decodes image files to uint8 (H, W, ``channels``) arrays (``channels`` 1: grayscale,
    3: RGB; other modes are converted).  ``size``: (H, W) every image must have (None: any)
    with ``size_hint``, the words telling how to accept other sizes.  ``jpeg_draft``: JPEG
    boxes may be decoded at a reduced scale; ``jpeg_kernel``: JPEG files are decoded by the
    region-of-interest kernel where it is built (False: always Pillow)."""

    def __init__(self, channels, size=None, size_hint="", jpeg_draft=True, jpeg_kernel=True):
        if channels not in (1, 3):
            raise DataError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}")
        self.channels, self.size, self.size_hint = channels, size, size_hint
        self.jpeg_draft, self.jpeg_kernel = bool(jpeg_draft), bool(jpeg_kernel)
        self._jpeg = False

    @property
    def jpeg(self):
        """The JPEG kernel's cffi module, or None (Pillow decodes every JPEG): found on first
        use in each process (a cffi module does not pickle into a loader worker)."""
        if self._jpeg is False:
            self._jpeg = jpeg_module() if self.jpeg_kernel else None
        return self._jpeg

    def __getstate__(self):
        return {**self.__dict__, "_jpeg": False}

    @property
    def decodes_boxes(self):
        """True when :meth:`decode_box` of a JPEG decodes less than the whole image (its box,
        or at a reduced scale): then a pipeline that starts with a resized box should draw
        its boxes from the headers first."""
        return self.jpeg_draft or self.jpeg is not None

    def header(self, path):
        """(H, W, mode) of image ``path`` from its header alone (nothing decoded)."""
        with self._pillow(path, self._file(path)) as image:
            return image.height, image.width, image.mode

    def decode(self, path):
        """The pixels of ``path``: uint8 (H, W, channels)."""
        return self.decode_box(path)[0]

    def decode_box(self, path, box=None, out_hw=None, opened=None, alloc=None):
        """``(pixels, box)``: the pixels of ``path`` (uint8 (h, w, channels)) and ``box``
        (top, left, height, width; int64 (4,), drawn on the full image) in their coordinates.
        With ``jpeg_draft`` a JPEG whose ``box`` is resized to ``out_hw`` (h, w) is decoded at
        the scale :func:`draft_scale` picks and the box mapped into it (:func:`scaled_box`).
        The JPEG kernel decodes only that box, into rows of up to :data:`~.jpeg_kernel.
        ROW_SLACK` more pixels (libjpeg's own, written in place; the pixels outside the box
        are unspecified) from ``alloc(shape)`` (a C-contiguous uint8 array of that shape;
        None: a new one); otherwise every pixel is decoded.  ``opened``: what :meth:`open` gave for ``path`` (closed here), else the
        file is opened."""
        handle = opened if opened is not None else self.open(path)
        if isinstance(handle, _JpegBytes):
            data = handle.data
            with handle:
                self._check_size(path, handle.height, handle.width)
                found = self._kernel_box(path, handle, box, out_hw, alloc)
            if found is not None:
                return found
            handle = self._pillow(path, io.BytesIO(data))
        with handle as image:
            self._check_size(path, image.height, image.width)
            full_hw = image.height, image.width
            scale = draft_scale(box, out_hw) if self.jpeg_draft and box is not None and \
                image.format == "JPEG" else 1
            if scale > 1:
                image.draft(None, (full_hw[1] // scale, full_hw[0] // scale))
                scale = _scale_of(full_hw, (image.height, image.width))
            try:
                mode = "L" if self.channels == 1 else "RGB"
                image.load()
                image = image if image.mode == mode else image.convert(mode)
            except (OSError, SyntaxError, ValueError, EOFError) as err:
                raise DataError(f"{path}: corrupt or truncated image ({_words(err)})") from None
            pixels = np.asarray(image, dtype=np.uint8)
        pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], self.channels)
        if box is not None and scale > 1:
            box = scaled_box(box, scale, pixels.shape[:2])
        return pixels, box

    def _check_size(self, path, height, width):
        if self.size is not None and (height, width) != tuple(self.size):
            raise DataError(f"{path}: the image is {height}x{width} but the data set's images "
                            f"are {self.size[0]}x{self.size[1]}{self.size_hint}")

    def _kernel_box(self, path, jpeg, box, out_hw, alloc):
        """:meth:`decode_box`'s result from the JPEG kernel for the :class:`_JpegBytes`
        ``jpeg``, or None when the kernel does not take the file after all."""
        full_hw = jpeg.height, jpeg.width
        scale = draft_scale(box, out_hw) if self.jpeg_draft and box is not None else 1
        hw = (-(-full_hw[0] // scale), -(-full_hw[1] // scale))
        whole = box is None
        box = np.array([0, 0, *hw] if whole else box, np.int64)
        if scale > 1:
            box = scaled_box(box, scale, hw)
        width = hw[1] if whole else min(hw[1], int(box[3]) + ROW_SLACK)
        shape = (int(box[2]), width, self.channels)
        out = np.empty(shape, np.uint8) if alloc is None else alloc(shape)
        left = decode_jpeg_into(self.jpeg, jpeg.data, path, box, scale, out, MAX_SIDE,
                                MAX_PIXELS)
        if left is None:
            return None
        return out, None if whole else np.array([0, left, box[2], box[3]], np.int64)

    def open(self, path):
        """Image ``path`` opened, its header read and checked, nothing decoded: a ``with``
        target giving the image (``.image``: its ``height``, ``width``, ``mode``), closed
        on leaving it or by ``close()``; :meth:`decode_box` takes it to decode without
        opening the file again.  A JPEG the kernel decodes is read whole and its header
        parsed by libjpeg (no Pillow); other files are opened with Pillow."""
        file = self._file(path)
        if self.jpeg is not None:
            try:
                jpeg = self._jpeg_bytes(path, file)
            except BaseException:
                file.close()
                raise
            if jpeg is not None:
                file.close()
                return jpeg
            file.seek(0)
        return self._pillow(path, file)

    def _file(self, path):
        """``path`` opened for reading (a regular file of at most :data:`MAX_FILE_BYTES`)."""
        file = open_regular(path, DataError, "image")
        try:
            size = file.seek(0, 2)
            file.seek(0)
        except OSError as err:
            file.close()
            raise DataError(f"{path}: cannot read the image file ({_words(err)})") from None
        if size > MAX_FILE_BYTES:
            file.close()
            raise DataError(f"{path}: the image file is {size:,} bytes, more than the "
                            f"{MAX_FILE_BYTES:,} an image may have")
        return file

    def _jpeg_bytes(self, path, file):
        """A :class:`_JpegBytes` of open ``file`` when it is a JPEG the kernel decodes, else
        None (the file's position then undefined)."""
        try:
            data = file.read(len(JPEG_START))
            if data != JPEG_START:
                return None
            data += file.read()
        except OSError as err:
            raise DataError(f"{path}: corrupt or truncated image ({_words(err)})") from None
        height, width, components, takes = jpeg_header(self.jpeg, data, path)
        if not takes:
            return None
        _check_dimensions(path, height, width)
        return _JpegBytes(data, height, width, "L" if components == 1 else "RGB")

    def _pillow(self, path, file):
        """Open ``file`` (of ``path``, at its start; closed on any error) with Pillow, as
        :meth:`open` gives it."""
        Image = pillow()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                image = Image.open(file, formats=FORMATS)
        except (Image.UnidentifiedImageError, Image.DecompressionBombWarning,
                Image.DecompressionBombError, OSError, SyntaxError, ValueError, EOFError) as err:
            file.close()
            if isinstance(err, Image.UnidentifiedImageError):
                raise DataError(f"{path}: not a PNG or JPEG image") from None
            if isinstance(err, (Image.DecompressionBombWarning, Image.DecompressionBombError)):
                raise DataError(f"{path}: the image has more than {MAX_PIXELS:,} pixels "
                                f"(refused before decoding)") from None
            raise DataError(f"{path}: corrupt or truncated image ({_words(err)})") from None
        try:
            _check_dimensions(path, image.height, image.width)
        except DataError:
            image.close()
            file.close()
            raise
        return _Closing(image, file)


def _check_dimensions(path, height, width):
    if not (0 < height <= MAX_SIDE and 0 < width <= MAX_SIDE) or height * width > MAX_PIXELS:
        raise DataError(f"{path}: the image is {height}x{width}; images may have at most "
                        f"{MAX_SIDE:,} pixels a side and {MAX_PIXELS:,} in all (refused before "
                        f"decoding)")


def draft_scale(box, out_hw):
    """The largest of 8, 4, 2 (else 1) that divides the ``box`` (top, left, height, width)
    to at least ``out_hw`` (h, w) in both axes: the reduced scale a JPEG may be decoded at."""
    for scale in (8, 4, 2):
        if int(box[2]) >= scale * int(out_hw[0]) and int(box[3]) >= scale * int(out_hw[1]):
            return scale
    return 1


def scaled_box(box, scale, hw):
    """``box`` (top, left, height, width) of the full image in the image decoded at 1 /
    ``scale`` of (h, w) ``hw``: each of its numbers divided by ``scale`` and rounded half
    down, the box kept inside the image; int64 (4,)."""
    top, left, height, width = (int(v) for v in box)
    height = min(max((2 * height + scale - 1) // (2 * scale), 1), hw[0])
    width = min(max((2 * width + scale - 1) // (2 * scale), 1), hw[1])
    top = min((2 * top + scale - 1) // (2 * scale), hw[0] - height)
    left = min((2 * left + scale - 1) // (2 * scale), hw[1] - width)
    return np.array([top, left, height, width], np.int64)


def _scale_of(full_hw, hw):
    """The scale libjpeg decoded (H, W) ``full_hw`` at to give ``hw`` (1 when none of 2, 4, 8
    gives it: the draft was declined)."""
    for scale in (8, 4, 2):
        if (-(-full_hw[0] // scale), -(-full_hw[1] // scale)) == tuple(hw):
            return scale
    return 1


class _JpegBytes:
    """A JPEG file the kernel decodes, read whole: its bytes (``data``), ``height``,
    ``width`` and ``mode`` from libjpeg's header; the ``with`` target and ``.image`` of
    :meth:`Decoder.open` (itself)."""

    format = "JPEG"

    def __init__(self, data, height, width, mode):
        self.data, self.height, self.width, self.mode = data, height, width, mode

    @property
    def held(self):
        """The bytes of memory this holds until closed."""
        return len(self.data)

    @property
    def image(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.data = b""


class _Closing:
    """An open Pillow image and its file, closed together (a ``with`` target)."""

    #: the bytes of memory this holds until closed (an open file, a parsed header)
    held = 0

    def __init__(self, image, file):
        self.image, self.file = image, file

    def __enter__(self):
        return self.image

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.image.close()
        self.file.close()


def _words(err):
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 120 else text[:117] + "..."
