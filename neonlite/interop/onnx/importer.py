"""The layers of a standard ONNX CNN (``torch.onnx.export``, the ONNX model zoo), for
:meth:`neonlite.Model.from_onnx` (``neonlite/onnx_import.py``), which makes and initializes the model.

The file is read and checked first (``onnx_file.py``: bounded, no external data, no cycle or
unknown name), its nodes are walked into nested layers (``import_walk.py``: chains,
``MergeSum`` / ``SkipNode`` residuals, ``MergeBroadcast`` concatenations) and each operator
becomes layers (``import_ops.py``, the operator list in :data:`SUPPORTED`) with the file's
weights in neonlite's layouts (:func:`onnx_layers`).
"""
import numpy as np

from ...layers import MergeBroadcast, MergeSum, SkipNode
from .errors import OnnxImportError
from .import_ops import NCHW, NHWC, OPS, Tensor
from .graph import unique_name
from .import_walk import GraphWalk
from .onnx_file import node_label

#: every operator import reads (Add / Sum of two branches and Concat are the joins)
SUPPORTED = tuple(sorted(set(OPS) | {"Concat", "Constant"}))


class Importer:
    """The state of one import: the checked graph, the layer names given so far and each
    layer's weights (``layer -> {attr: array}``), set once the model is initialized."""

    def __init__(self, onnx, graph):
        self.onnx, self.graph, self.opset = onnx, graph, graph.opset
        self.weights, self.names, self._fused = [], set(), set()
        self.users = {}
        for node in graph.nodes:
            for name in node.input:
                self.users.setdefault(name, []).append(node)

    def fail(self, node, message):
        raise OnnxImportError(f"{self.graph.path}: {node_label(node)}: {message}")

    def attrs(self, node):
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}

    def const(self, node, index, what):
        """Input ``index`` of ``node``, which must be a constant (an initializer or a
        ``Constant`` node's output)."""
        if index >= len(node.input) or not node.input[index]:
            self.fail(node, f"has no input {index} ({what})")
        name = node.input[index]
        if name not in self.graph.constants:
            self.fail(node, f"input {index} ({what}, {name!r}) is computed in the graph; "
                            f"import takes it as a constant (an initializer)")
        return self.graph.constants[name]

    def vector(self, node, array, size, what):
        """``array`` as a float32 vector of ``size`` values."""
        if array.size != size:
            self.fail(node, f"{what} has shape {list(array.shape)}; expected {size} values")
        return np.asarray(array, np.float32).reshape(size)

    def layer_name(self, node):
        """A unique, printable layer name from the node's name (or its output's)."""
        base = (node.name or node.output[0]).strip("/").replace("/", ".") or node.op_type
        return unique_name("".join(c if c.isprintable() else "_" for c in base), self.names)

    def set_weights(self, layer, weights):
        self.weights.append((layer, weights))

    def only_first_output(self, node):
        """Outputs after the first (a MaxPool's indices, a training BatchNorm's statistics,
        a Dropout's mask) must be unused."""
        for out in node.output[1:]:
            if out and (self.users.get(out) or out == self.graph.output):
                self.fail(node, f"its output {out!r} is used; import reads the first output "
                                f"only")

    def fuses_relu(self, node):
        """Whether the one user of ``node``'s output is a Relu, which the layer then applies
        in its own pass (Convolution's epilogue, BatchNorm's)."""
        out = node.output[0]
        users = self.users.get(out, [])
        if out == self.graph.output or len(users) != 1 or users[0].op_type != "Relu":
            return False
        self._fused.add(id(users[0]))
        return True

    def fused(self, node):
        return id(node) in self._fused

    def convert(self, node, value):
        if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
            domain = f" of domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
            self.fail(node, f"operator {node.op_type}{domain} is not supported; import reads "
                            f"{', '.join(SUPPORTED)}")
        if node.op_type in ("Add", "Sum") and len(node.input) != 2:
            self.fail(node, "adds one input to constants; import takes x + bias")
        return OPS[node.op_type](self, node, value)

    def join(self, node, branches):
        """Add / Sum -> MergeSum; Concat on the channel axis -> MergeBroadcast."""
        values = [value for _, value in branches]
        constant = next((i for i in node.input if i in self.graph.constants), None)
        if constant is not None:
            self.fail(node, f"joins branches with the constant {constant!r}; a merge layer "
                            f"joins branches only")
        if any(v.order is not None for v in values):
            self.fail(node, "joins vectors flattened from NCHW features, whose order neonlite "
                            "does not keep")
        layers = [layers or [SkipNode()] for layers, _ in branches]
        name = self.layer_name(node)
        if any(v.layout != values[0].layout for v in values if v.is_image):
            self.fail(node, "joins images in different layouts (NCHW and NHWC)")
        if node.op_type == "Concat":
            rank = len(values[0].shape) + 1
            axis = self.attrs(node).get("axis")
            if axis is None or axis % rank != values[0].channel_axis or any(
                    v.shape[:-1] != values[0].shape[:-1] for v in values):
                self.fail(node, f"concatenates along axis {axis}; neonlite's MergeBroadcast "
                                f"joins along channels (axis 1 of NCHW, the last otherwise)")
            width = sum(v.shape[-1] for v in values)
            return [MergeBroadcast(layers, merge="concat", name=name)], \
                Tensor(values[0].shape[:-1] + (width,), layout=values[0].layout)
        if any(v.shape != values[0].shape for v in values):
            self.fail(node, f"adds tensors of per-example shapes "
                            f"{[v.onnx_shape() for v in values]}; neonlite's MergeSum adds "
                            f"equal shapes")
        return [MergeSum(layers, name=name)], values[0]


def input_tensor(graph, walk):
    """The graph input as a :class:`~.import_ops.Tensor`: (N, D) vectors, or images, NCHW
    unless every node reading the input transposes it to NCHW (then it is NHWC, as
    neonlite's own exports are)."""
    dims = graph.input_dims
    if len(dims) not in (2, 4) or any(d is None or d < 1 for d in dims[1:]):
        raise OnnxImportError(f"{graph.path}: the graph input {graph.input!r} has dims "
                              f"{['?' if d is None else d for d in dims]}; import takes (N, D) "
                              f"vectors or (N, C, H, W) images with fixed sizes but N")
    if len(dims) == 2:
        return Tensor((dims[1],))
    users = walk.users.get(graph.input, [])
    to_nchw = [n for n in users if n.op_type == "Transpose" and [
        a.ints for a in n.attribute if a.name == "perm"] == [[0, 3, 1, 2]]]
    if users and len(to_nchw) == len(users):
        return Tensor(dims[1:], layout=NHWC)
    return Tensor((dims[2], dims[3], dims[1]), layout=NCHW)


def onnx_layers(graph, onnx):
    """``(layers, in_shape, weights)`` of a checked :class:`~.onnx_file.OnnxGraph`: the
    layers, the per-example input shape (NHWC for images) and the ``"<layer>.<attr>" ->
    array`` weights to load once the model is initialized."""
    importer = Importer(onnx, graph)
    walk = GraphWalk(graph, importer.convert, importer.join)
    source = input_tensor(graph, walk)
    shape = source.shape
    layers, _ = walk.sequence(graph.input, source, graph.output)
    if not layers:
        raise OnnxImportError(f"{graph.path}: the graph computes no layer (its output is its "
                              f"input)")
    weights = {f"{layer.name}.{attr}": np.asarray(array, np.float32)
               for layer, arrays in importer.weights for attr, array in arrays.items()}
    return layers, shape, weights
