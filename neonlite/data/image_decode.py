"""Decoding one PNG or JPEG file into a uint8 (H, W, C) array with Pillow, bounded: the file
must be a regular file no larger than :data:`MAX_FILE_BYTES`, its header's dimensions are
checked (each side at most :data:`MAX_SIDE`, at most :data:`MAX_PIXELS` pixels) before any
pixel is decoded, and Pillow's own decompression-bomb limit is set to the same bound.

Pillow is an optional dependency (``pip install neonlite[images]``); it is imported when an
image data set is made, and its absence is one line saying how to install it.
"""
import warnings

import numpy as np

from ..safe_files import open_regular
from .iterator import DataError

#: the most pixels one image may have (a 16k x 16k photo; a decompression bomb is refused)
MAX_PIXELS = 1 << 28
#: the longest side one image may have
MAX_SIDE = 1 << 16
#: the largest image file read (bytes)
MAX_FILE_BYTES = 1 << 30
FORMATS = ("PNG", "JPEG")


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
    with ``size_hint``, the words telling how to accept other sizes."""

    def __init__(self, channels, size=None, size_hint=""):
        if channels not in (1, 3):
            raise DataError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}")
        self.channels, self.size, self.size_hint = channels, size, size_hint

    def header(self, path):
        """(H, W, mode) of image ``path`` from its header alone (nothing decoded)."""
        with self._open(path) as image:
            return image.height, image.width, image.mode

    def decode(self, path):
        """The pixels of ``path``: uint8 (H, W, channels)."""
        with self._open(path) as image:
            if self.size is not None and (image.height, image.width) != tuple(self.size):
                raise DataError(f"{path}: the image is {image.height}x{image.width} but the "
                                f"data set's images are {self.size[0]}x{self.size[1]}"
                                f"{self.size_hint}")
            try:
                image = image.convert("L" if self.channels == 1 else "RGB")
            except (OSError, SyntaxError, ValueError, EOFError) as err:
                raise DataError(f"{path}: corrupt or truncated image ({_words(err)})") from None
            pixels = np.asarray(image, dtype=np.uint8)
        return pixels.reshape(pixels.shape[0], pixels.shape[1], self.channels)

    def _open(self, path):
        Image = pillow()
        file = open_regular(path, DataError, "image")
        try:
            size = file.seek(0, 2)
            file.seek(0)
            if size > MAX_FILE_BYTES:
                raise DataError(f"{path}: the image file is {size:,} bytes, more than the "
                                f"{MAX_FILE_BYTES:,} an image may have")
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                image = Image.open(file, formats=FORMATS)
        except DataError:
            file.close()
            raise
        except (Image.UnidentifiedImageError, Image.DecompressionBombWarning,
                Image.DecompressionBombError, OSError, SyntaxError, ValueError, EOFError) as err:
            file.close()
            if isinstance(err, Image.UnidentifiedImageError):
                raise DataError(f"{path}: not a PNG or JPEG image") from None
            if isinstance(err, (Image.DecompressionBombWarning, Image.DecompressionBombError)):
                raise DataError(f"{path}: the image has more than {MAX_PIXELS:,} pixels "
                                f"(refused before decoding)") from None
            raise DataError(f"{path}: corrupt or truncated image ({_words(err)})") from None
        height, width = image.height, image.width
        if not (0 < height <= MAX_SIDE and 0 < width <= MAX_SIDE) or \
                height * width > MAX_PIXELS:
            image.close()
            file.close()
            raise DataError(f"{path}: the image is {height}x{width}; images may have at most "
                            f"{MAX_SIDE:,} pixels a side and {MAX_PIXELS:,} in all (refused "
                            f"before decoding)")
        return _Closing(image, file)


class _Closing:
    """An open Pillow image and its file, closed together (a ``with`` target)."""

    def __init__(self, image, file):
        self.image, self.file = image, file

    def __enter__(self):
        return self.image

    def __exit__(self, *exc):
        self.image.close()
        self.file.close()


def _words(err):
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 120 else text[:117] + "..."
