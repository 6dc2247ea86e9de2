"""Which function writes each layer class as ONNX, and the walk over a model's layers.

Every exporter is ``export(builder, layer, value) -> value``: it adds the nodes computing the
layer's inference output from ``value`` (a :class:`~.graph.Value`) to ``builder`` and returns
the output's value.  Lookup is by the exact class, never a base class, so a new layer class is
refused (and flagged by the coverage test) until it has an exporter of its own.
"""
from .errors import OnnxExportError

#: the oldest opset any exporter writes (Softmax over one axis, Split/Squeeze with inputs)
MIN_OPSET = 13

EXPORTERS = {}
NEEDED_OPSET = {}


def exports(*classes, opset=MIN_OPSET):
    """Register the decorated function as the exporter of each of ``classes``, which need
    ``opset`` or newer (containers and layers that write no node: 1)."""
    def register(function):
        for cls in classes:
            EXPORTERS[cls] = function
            NEEDED_OPSET[cls] = opset
        return function
    return register


def export_layer(builder, layer, value, *context):
    """The output value of ``layer`` on ``value`` (see the module's docstring); ``context``:
    what a containing layer passes on to its parts (a bidirectional layer's sequence
    lengths)."""
    cls = type(layer)
    function = EXPORTERS.get(cls)
    if function is None:
        raise OnnxExportError(f"layer '{layer.name}' ({cls.__name__}) cannot be exported to "
                              f"ONNX yet (no exporter for {cls.__name__}; see docs/onnx.md)")
    builder.need_opset(layer, NEEDED_OPSET[cls], f"its {cls.__name__} export")
    return function(builder, layer, value, *context)
