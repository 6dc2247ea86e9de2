"""The one error type of ONNX export, and the optional ``onnx`` library's import."""
import importlib

from ..errors import InteropError


class OnnxExportError(InteropError):
    """A model (or an output path, or an opset) that cannot be written as ONNX; the message
    names the layer or path and says what was expected, in one line."""


def require_onnx():
    """The ``onnx`` module, or an :class:`OnnxExportError` saying how to install it (the
    optional extra ``neonlite[onnx]``, never needed by the rest of the library)."""
    try:
        return importlib.import_module("onnx")
    except ImportError:
        raise OnnxExportError("onnx is not installed; ONNX export needs the optional extra: "
                              "pip install neonlite[onnx]") from None
