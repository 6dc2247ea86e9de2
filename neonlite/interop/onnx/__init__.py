"""ONNX export of neonlite models (``Model.export_onnx``, ``neonlite export --format onnx``).

One module per layer family registers the exporters of its layer classes (``registry.py``):
``dense.py`` (Linear, Bias, BlockSparseLinear), ``activation.py`` (Activation, Dropout),
``image.py`` (Convolution, Deconvolution, Pooling), ``norm.py`` (BatchNorm, LayerNorm, LRN),
``structure.py`` (containers, merges, reshapes), ``sequence.py`` (embeddings, reductions),
``attention.py`` (MultiHeadAttention, BlockSparseAttention, TransformerBlock), ``recurrent.py``
(Recurrent, LSTM, GRU, the bidirectional layers); ``graph.py`` builds the graph and tracks each
tensor's layout; ``export.py`` checks and writes the file.  Import (``Model.from_onnx``, ``neonlite/onnx_import.py``) is ``onnx_file.py``
(reading and checking a file), ``import_walk.py`` (the graph as nested layers),
``import_ops.py`` (each operator as layers) and ``importer.py`` (the model). The ``onnx`` package is the optional
extra ``neonlite[onnx]``, imported only when an export runs.
"""
from .errors import OnnxExportError, OnnxImportError
from .export import DEFAULT_OPSET, build_onnx_model, export_onnx
from .importer import SUPPORTED
from .registry import EXPORTERS

__all__ = ["export_onnx", "build_onnx_model", "OnnxExportError", "EXPORTERS", "DEFAULT_OPSET",
           "OnnxImportError", "SUPPORTED"]
