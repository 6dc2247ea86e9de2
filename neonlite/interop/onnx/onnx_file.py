"""Reading an ``.onnx`` file for import, bounded and safe, and checking its graph.

:func:`read_onnx_graph` reads at most :data:`MAX_ONNX_BYTES` from a regular file
(:func:`neonlite.safe_files.read_bounded`: no FIFO, device or folder, never more than the
bound), parses it as an ``onnx.ModelProto`` and refuses, in one line each:

* a file that does not parse (corrupt or truncated) or holds no graph;
* a tensor whose data lives in an external file (nothing beside the ``.onnx`` file is read),
  a sparse initializer, a tensor whose data does not fill its dims, or an element type other
  than float, double, float16, int32 and int64;
* a node input, or the graph output, that names no tensor of the graph (an unknown name), a
  tensor made by two nodes, and a cycle (the nodes cannot be ordered so that every input is
  made before it is used);
* a graph with other than one data input and one output.

The result, an :class:`OnnxGraph`, holds the nodes in an order where every input comes first,
the constant tensors (initializers, ``Constant`` nodes and ``Identity`` nodes of constants,
folded, as numpy arrays) and the data
input's and output's names and dims.
"""
from collections import Counter, defaultdict

import numpy as np

from ...safe_files import read_bounded
from .errors import OnnxImportError, require_onnx

#: the largest ``.onnx`` file read: protobuf's own 2 GiB limit on one message
MAX_ONNX_BYTES = 2**31 - 1
#: ONNX element type -> numpy dtype of the constants import accepts
DTYPES = {1: np.float32, 11: np.float64, 10: np.float16, 6: np.int32, 7: np.int64}
#: the typed field of a TensorProto that holds each element type's values
FIELDS = {1: "float_data", 11: "double_data", 10: "int32_data", 6: "int32_data",
          7: "int64_data"}


class OnnxGraph:
    """A checked ONNX graph (see the module's docstring): ``nodes`` in dependency order,
    ``constants`` name -> array, ``input`` / ``output`` names, ``input_dims`` (ints, or None
    for a symbolic dim), ``opset`` (the default domain's), ``producer`` name -> node."""

    def __init__(self, path, nodes, constants, input_name, input_dims, output, opset):
        self.path, self.nodes, self.constants = path, nodes, constants
        self.input, self.input_dims, self.output, self.opset = (input_name, input_dims, output,
                                                                opset)
        self.producer = {out: node for node in nodes for out in node.output if out}


def node_label(node):
    """``node 'name' (Op)``, the way every message names a node (its first output when it
    has no name)."""
    name = node.name or (node.output[0] if node.output else "?")
    return f"node {name!r} ({node.op_type})"


def tensor_array(onnx, tensor, where):
    """The numpy array of a ``TensorProto``, checked before any array is made: inline data
    only, a supported element type, and exactly as many values as its dims say."""
    label = f"{where}: tensor {tensor.name!r}"
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
        raise OnnxImportError(f"{label} keeps its data in an external file; neonlite reads "
                              f"only the .onnx file itself (save the model with its weights "
                              f"inside: onnx.save(model, path, save_as_external_data=False))")
    if tensor.data_type not in DTYPES:
        raise OnnxImportError(f"{label} has ONNX element type {tensor.data_type}; import takes "
                              f"float, double, float16, int32 and int64 tensors")
    if any(d < 0 for d in tensor.dims):
        raise OnnxImportError(f"{label} has a negative dimension {list(tensor.dims)}")
    count = 1
    for d in tensor.dims:
        count *= d
    dtype = np.dtype(DTYPES[tensor.data_type])
    if tensor.HasField("raw_data"):
        held = len(tensor.raw_data) // dtype.itemsize
        exact = len(tensor.raw_data) % dtype.itemsize == 0
    else:
        held, exact = len(getattr(tensor, FIELDS[tensor.data_type])), True
    if held != count or not exact:
        raise OnnxImportError(f"{label} has dims {list(tensor.dims)} ({count:,} values) but "
                              f"holds data for {held:,} (a truncated or corrupt file?)")
    return onnx.numpy_helper.to_array(tensor).astype(dtype, copy=False)


def _parse(onnx, path, data):
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError, or its C++ parser's errors
        raise OnnxImportError(f"{path}: not a readable ONNX model (corrupt or truncated? "
                              f"{type(err).__name__}: {str(err).strip() or 'parse error'})"
                              ) from None
    if not proto.HasField("graph") or not proto.graph.node:
        raise OnnxImportError(f"{path}: holds no ONNX graph with nodes (not an ONNX model, or "
                              f"a truncated one)")
    return proto


def _constant_node(onnx, node, where):
    """The array of a ``Constant`` node (its ``value`` tensor, or ``value_float(s)`` /
    ``value_int(s)``)."""
    for attr in node.attribute:
        if attr.name == "value":
            return tensor_array(onnx, attr.t, where)
        if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
            value = onnx.helper.get_attribute_value(attr)
            return np.array(value, np.float32 if "float" in attr.name else np.int64)
    raise OnnxImportError(f"{where}: {node_label(node)} has no value this import reads "
                          f"(value, value_float(s) or value_int(s))")


def _constants(onnx, graph, path):
    if len(graph.sparse_initializer):
        raise OnnxImportError(f"{path}: sparse initializer "
                              f"{graph.sparse_initializer[0].values.name!r} is not supported "
                              f"(store it dense)")
    constants = {t.name: tensor_array(onnx, t, path) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for out in node.output:
                constants[out] = _constant_node(onnx, node, path)
    return constants


def _ordered(graph, known, path):
    """The nodes in an order where each node's inputs are made before it (Kahn's
    algorithm); an unknown input name, a tensor made twice or a cycle is refused."""
    made = {}
    for node in graph.node:
        for out in node.output:
            if out in made or (out and out in known):
                raise OnnxImportError(f"{path}: tensor {out!r} is made twice (by "
                                      f"{node_label(node)} and before it); each tensor "
                                      f"must have one source")
            if out:
                made[out] = node
    waiting, users = Counter(), defaultdict(list)
    for i, node in enumerate(graph.node):
        for name in node.input:
            if not name or name in known:
                continue
            if name not in made:
                raise OnnxImportError(f"{path}: {node_label(node)} takes tensor {name!r}, "
                                      f"which no node, initializer or graph input makes "
                                      f"(an unknown tensor name)")
            waiting[i] += 1
            users[name].append(i)
    ready = [i for i in range(len(graph.node)) if waiting[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(graph.node[i])
        for out in graph.node[i].output:
            for user in users.get(out, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
    if len(order) != len(graph.node):
        stuck = next(n for i, n in enumerate(graph.node) if waiting[i] > 0)
        raise OnnxImportError(f"{path}: the graph has a cycle through {node_label(stuck)} "
                              f"(its inputs depend on its own output); an ONNX graph must be "
                              f"acyclic")
    return order, made


def _fold_constants(nodes, constants):
    """The nodes left once ``Constant`` nodes and ``Identity`` nodes of constants (as
    ``torch.onnx.export`` writes for shared weights) are folded into ``constants``."""
    kept = []
    for node in nodes:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue
        if node.op_type == "Identity" and node.input and node.input[0] in constants:
            constants[node.output[0]] = constants[node.input[0]]
            continue
        kept.append(node)
    return kept


def _dims(value_info):
    shape = value_info.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]


def read_onnx_graph(path, limit=MAX_ONNX_BYTES):
    """The checked :class:`OnnxGraph` of the ``.onnx`` file ``path`` (see the module's
    docstring); :class:`~.errors.OnnxImportError` otherwise."""
    onnx = require_onnx(OnnxImportError)
    data = read_bounded(path, limit, OnnxImportError, "ONNX file")
    proto = _parse(onnx, path, data)
    graph = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise OnnxImportError(f"{path}: the model imports no version of the default ONNX "
                              f"operator set")
    constants = _constants(onnx, graph, path)
    inputs = [i for i in graph.input if i.name not in constants]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise OnnxImportError(f"{path}: the graph has {len(inputs)} data input(s) and "
                              f"{len(graph.output)} output(s); import takes one of each")
    known = {t.name for t in graph.initializer} | {inputs[0].name}
    nodes, made = _ordered(graph, known, path)
    nodes = _fold_constants(nodes, constants)
    output = graph.output[0].name
    if output not in made and output not in known:
        raise OnnxImportError(f"{path}: the graph output {output!r} is made by no node "
                              f"(an unknown tensor name)")
    return OnnxGraph(path, nodes, constants, inputs[0].name, _dims(inputs[0]), output, opset)
