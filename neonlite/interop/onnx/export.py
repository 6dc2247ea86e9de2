"""``export_onnx(model, path, opset)``: a neonlite model as one ONNX file, checked by ONNX's
checker and shape inference before a byte is written, and written atomically.

The graph takes neonlite's own batches (images NHWC, sequences (N, T, D)) under the input
``<model name>.input`` with a dynamic batch axis ``batch`` (and, for a SegmentEmbedding, its
segment ids (N, T) as the input ``<layer>.segment_ids``), and gives ``<model name>.output``
in neonlite's layout; initializers and intermediate tensors are named after the layers.
The model's metadata records neonlite's version and the model's description (JSON).
"""
import json

from ...atomic import atomic_write
from ...layers import Embedding
from ...output_paths import check_output
from ...version import __version__
from . import (activation, attention, dense, image, norm, recurrent,  # noqa: F401
               sequence, structure)  # (each registers its exporters)
from .errors import OnnxExportError, require_onnx
from .graph import NHWC, GraphBuilder, Value
from .registry import MIN_OPSET, export_layer

DEFAULT_OPSET = 17


def check_output_path(path):
    """The absolute path of ONNX output ``path`` under the project's one rule for outputs
    (:func:`neonlite.output_paths.check_output`: absent or a regular file, in a folder this
    process can write in), checked before any work."""
    return check_output(path, "ONNX output")


def check_opset(onnx, opset):
    """An int from :data:`~.registry.MIN_OPSET` to the newest opset the ``onnx`` package
    knows (an older one is refused by the first layer that needs more)."""
    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < 1 or opset > newest:
        raise OnnxExportError(f"opset must be an integer from {MIN_OPSET} to {newest} (the "
                              f"newest this onnx {onnx.__version__} knows), got {opset!r}")
    return opset


def takes_sequences(model):
    """Whether the model's input is a sequence: token ids (T,) into an Embedding, or (T, D)."""
    leaves = model.layers.leaves()
    return len(model.in_shape) == 2 or bool(leaves) and isinstance(leaves[0], Embedding)


def dims(builder, value):
    """The ONNX dims of a graph input or output: ``batch``, then ``steps`` for a sequence's
    time axis (unless a layer fixed it), then the configured sizes."""
    steps = value.steps and not builder.fixed_steps
    return ["batch", *(("steps",) + value.shape[1:] if steps else value.shape)]


def build_onnx_model(model, opset=DEFAULT_OPSET, fold_bn=False):
    """The checked ``onnx.ModelProto`` of an initialized ``model`` (see the module's
    docstring); ``fold_bn``: each BatchNorm right after a Convolution or Linear is folded
    into its weights (``fold.py``)."""
    onnx = require_onnx()
    check_opset(onnx, opset)
    if model.in_shape is None:
        raise OnnxExportError(f"model '{model.name}' has no parameters yet; initialize it (or "
                              f"load a checkpoint) before exporting it to ONNX")
    builder = GraphBuilder(onnx, opset, fold_bn)
    source = Value(builder.unique(f"{model.name}.input"), model.in_shape,
                   steps=takes_sequences(model))
    result = builder.to_layout(export_layer(builder, model.layers, source), NHWC)
    output = builder.node("Identity", [result.name], f"{model.name}.output")
    float32 = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(
        builder.nodes, model.name,
        [onnx.helper.make_tensor_value_info(v.name, float32, dims(builder, v))
         for v in [source] + builder.extra_inputs],
        [onnx.helper.make_tensor_value_info(output, float32, dims(builder, result))],
        initializer=builder.initializers)
    opsets = [onnx.helper.make_opsetid("", opset)]
    proto = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="neonlite",
                                   producer_version=__version__,
                                   ir_version=onnx.helper.find_min_ir_version_for(opsets),
                                   doc_string=f"neonlite {__version__} model '{model.name}'")
    onnx.helper.set_model_props(proto, {
        "neonlite_version": __version__,
        "description": json.dumps(model.get_description(), default=str, sort_keys=True)})
    try:
        onnx.checker.check_model(proto, full_check=True)
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxExportError(f"model '{model.name}': the exported graph fails ONNX's checks "
                              f"({first})") from None
    return proto


def export_onnx(model, path, opset=DEFAULT_OPSET, fold_bn=False):
    """Write ``model`` (initialized) to ``path`` as ONNX at ``opset`` (``fold_bn``: see
    :func:`build_onnx_model`); returns the path.
    Everything is checked before the file is written, and the file appears whole or not at
    all (:func:`neonlite.atomic.atomic_write`)."""
    path = check_output_path(path)
    proto = build_onnx_model(model, opset, fold_bn)
    data = proto.SerializeToString()
    with atomic_write(path) as out:
        out.write(data)
    return path
