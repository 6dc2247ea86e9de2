"""Hugging Face interoperability: pretrained BERT and GPT-2 checkpoints in and out (ONNX
export and import: ``neonlite.interop.onnx``, ``Model.export_onnx``, ``Model.from_onnx``).

:func:`import_hf` reads a model directory (``config.json`` + safetensors weights) into a
neonlite :class:`~neonlite.Model`; :func:`export_hf` writes one back in Hugging Face's naming.
The weights go through the ``safetensors`` library (no pickle, no code runs); it and
``tokenizers`` are the optional extra ``neonlite[hf]``, imported only when used.
"""
from .convert import FAMILIES, build_hf_model, export_hf, import_hf, is_export_folder
from .errors import InteropError

__all__ = ["import_hf", "export_hf", "build_hf_model", "InteropError", "FAMILIES",
           "is_export_folder"]
