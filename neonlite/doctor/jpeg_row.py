"""The ``JPEG decoder`` row of ``neonlite doctor``: which decoder reads the JPEG files of image
data sets: the region-of-interest kernel on the system's libjpeg-turbo
(``neonlite/data/jpeg_kernel.py``), or Pillow where the kernel cannot be built, and Pillow's
own version (it decodes PNG files and the JPEG files the kernel does not take)."""
from .report import OK, WARN, Row, one_line

#: what to do where the kernel is not built
INSTALL_LIBJPEG = ("install libjpeg-turbo's headers (apt-get install libjpeg-dev, dnf install "
                   "libjpeg-turbo-devel, brew install jpeg-turbo) so the compiler finds "
                   "jpeglib.h and -ljpeg; JPEG boxes are then decoded alone, faster")


def jpeg_row():
    """The row: ``ok`` with the kernel, ``warn`` on Pillow alone (slower for crops)."""
    try:
        from PIL import __version__ as pillow_version
    except ImportError:
        pillow_version = None
    pillow = f"Pillow {pillow_version}" if pillow_version else \
        "Pillow not installed (image data sets need pip install 'neonlite[images]')"
    try:
        from ..data.jpeg_kernel import jpeg_decoder_state
        in_use, words = jpeg_decoder_state()
    except Exception as err:  # a broken kernel build is this row, never a traceback
        in_use, words = False, f"the region-of-interest kernel cannot load: {one_line(err)}"
    if in_use:
        return Row("JPEG decoder", OK, f"{words}; {pillow}")
    switched_off = "=0" in words
    return Row("JPEG decoder", WARN, f"{words}; {pillow}",
               "unset the variable to use the kernel" if switched_off else INSTALL_LIBJPEG)
