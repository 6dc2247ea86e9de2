"""``Model.from_onnx(path)``: a standard ONNX CNN (``torch.onnx.export``, the ONNX model zoo) as a
neonlite :class:`~neonlite.Model` that takes neonlite's NHWC batches and trains like any other.

The file is read and checked and its operators become layers in ``neonlite.interop.onnx``
(``onnx_file.py``, ``import_walk.py``, ``import_ops.py``, ``importer.py``); here, beside the
model it makes, the model is initialized for the graph input's per-example shape and given
the file's weights.  Nothing is written;
``neonlite import model.onnx -o m.h5`` saves the result.
"""
from pathlib import Path

from .backends import gen_backend, get_backend
from .interop.onnx.errors import OnnxImportError, require_onnx
from .interop.onnx.importer import onnx_layers
from .interop.onnx.onnx_file import MAX_ONNX_BYTES, read_onnx_graph
from .serialize import ShapeStub


def _backend():
    try:
        return get_backend()
    except RuntimeError:
        return gen_backend("cpu", batch_size=1)


def import_onnx(model_class, path, name=None, limit=MAX_ONNX_BYTES):
    """The ``model_class`` (:class:`~neonlite.Model`) of the ONNX file ``path`` (at most
    ``limit`` bytes), initialized on the current backend (a CPU one of batch size 1 if none), named
    ``name`` (default: the file's stem); :class:`~.interop.onnx.errors.OnnxImportError` when the file
    cannot be read or uses what neonlite's layers do not express."""
    onnx = require_onnx(OnnxImportError)
    graph = read_onnx_graph(str(path), limit)
    layers, shape, weights = onnx_layers(graph, onnx)
    _backend()
    model = model_class(layers, name=name or Path(path).stem or "onnx")
    model.initialize(ShapeStub(shape, f"ONNX input {graph.input!r}"))
    params = model.get_params()
    for key, array in weights.items():
        if params[key].shape != array.shape:
            raise OnnxImportError(f"{path}: parameter {key!r} has shape {params[key].shape} "
                                  f"in neonlite, the file gives {array.shape}")
        params[key] = array
    model.set_params(params)
    return model
