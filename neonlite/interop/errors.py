"""The one error type of Hugging Face import and export, and the optional libraries' import."""
import importlib

from ..serialize import CheckpointError


class InteropError(CheckpointError):
    """A Hugging Face model directory (or a neonlite model to export) that cannot be converted;
    the message names the file or tensor and says what was expected, in one line."""


def require(module):
    """Import ``module`` (``safetensors``, ``safetensors.numpy``, ``tokenizers``), or an
    :class:`InteropError` saying how to install it: these are the optional extra
    ``neonlite[hf]``, never needed by the rest of the library."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise InteropError(f"{top} is not installed; Hugging Face import/export and tokenizers "
                           f"need the optional extra: pip install neonlite[hf]") from None
