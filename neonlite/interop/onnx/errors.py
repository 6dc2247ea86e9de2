"""The error types of ONNX export and import, and the optional ``onnx`` library's import."""
import importlib

from ..errors import InteropError


class OnnxExportError(InteropError):
    """A model (or an output path, or an opset) that cannot be written as ONNX; the message
    names the layer or path and says what was expected, in one line."""


class OnnxImportError(InteropError):
    """An ONNX file that cannot be read as a neonlite model: unreadable, corrupt, malformed
    (a cycle, an unknown tensor name) or using an operator neonlite's layers do not express;
    the message names the file, node or tensor and says what was expected, in one line."""


def require_onnx(error=OnnxExportError):
    """The ``onnx`` module, or an ``error`` saying how to install it (the optional extra
    ``neonlite[onnx]``, never needed by the rest of the library)."""
    try:
        return importlib.import_module("onnx")
    except ImportError:
        raise error("onnx is not installed; ONNX export and import need the optional extra: "
                    "pip install neonlite[onnx]") from None
