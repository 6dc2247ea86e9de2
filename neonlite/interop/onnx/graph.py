"""The graph an export builds: nodes, initializers and the layout of each tensor.

A :class:`Value` is one tensor of the graph: its ``name``, neonlite's per-example ``shape``
(no batch axis, in neonlite's layout: images (H, W, C), sequences (T, D)) and its ``layout``:
``"nhwc"`` (neonlite's own order, the only one outside images) or ``"nchw"`` (an image
transposed to the channels-first order ONNX's Conv, Pool, BatchNormalization and LRN take).
Layers that do not care (elementwise ones) keep the layout they are given, so a CNN's graph
transposes its NHWC input once, at the first convolution, and back once, where a layer needs
neonlite's order again (Flatten, Linear, Softmax, the output).

``steps`` says that the value's first per-example axis is a sequence's time axis, which the
graph leaves dynamic (``steps`` in the input's and output's dims) unless a layer writes the
length into the graph (a Flatten or Reshape of a sequence): that layer calls
:meth:`GraphBuilder.fix_steps` and the export declares the configured length instead.
"""
import numpy as np

from .errors import OnnxExportError

NCHW, NHWC = "nchw", "nhwc"
TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def unique_name(name, taken):
    """``name``, or ``name_1``, ``name_2``, ... the first not in the set ``taken``, which it
    joins."""
    candidate, n = name, 0
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate)
    return candidate


class Value:
    """A tensor of the graph (see the module's docstring)."""

    def __init__(self, name, shape, layout=NHWC, steps=False):
        self.name, self.shape, self.layout, self.steps = name, tuple(shape), layout, steps

    def like(self, name, shape=None, layout=None, steps=None):
        """A new value named ``name`` with this one's shape, layout and steps unless given."""
        return Value(name, self.shape if shape is None else shape,
                     self.layout if layout is None else layout,
                     self.steps if steps is None else steps)

    @property
    def is_image(self):
        return len(self.shape) == 3

    @property
    def channel_axis(self):
        """The axis of the last neonlite axis (channels, features) in the graph's tensor."""
        return 1 if self.layout == NCHW else len(self.shape)


class GraphBuilder:
    """Collects nodes and initializers in the order they are made; names are unique (a name
    taken twice gets a ``_1``, ``_2`` suffix).  ``opset`` is the default domain's version;
    ``fold_bn``: batch norms fold into the convolution or linear layer before them."""

    def __init__(self, onnx, opset, fold_bn=False):
        self.onnx, self.opset, self.fold_bn = onnx, opset, bool(fold_bn)
        self.nodes, self.initializers = [], []
        self.names = set()
        self.fixed_steps = False
        #: graph inputs after the model's own: (name, value) (a SegmentEmbedding's ids)
        self.extra_inputs = []
        #: the (N, T) float mask (1 at real tokens) of the Embedding with a pad_id, once made
        self.key_mask = None
        #: the (N,) int32 count of real tokens per sequence (recurrent ops' sequence_lens)
        self.sequence_lens = None
        self._parameters = {}
        self._transposed = {}

    def unique(self, name):
        return unique_name(name, self.names)

    def constant(self, name, array, dtype=np.float32):
        """An initializer holding ``array`` (as ``dtype``); returns its name."""
        name = self.unique(name)
        tensor = self.onnx.numpy_helper.from_array(np.array(array, dtype=dtype, order="C"), name)
        self.initializers.append(tensor)
        return name

    def parameter(self, param):
        """The initializer of a neonlite :class:`~neonlite.layers.Parameter`, named after it
        and written once however many layers use it (a tied table)."""
        if id(param) not in self._parameters:
            self._parameters[id(param)] = self.constant(param.name, param.value.get())
        return self._parameters[id(param)]

    def fix_steps(self, value):
        """A layer writes ``value``'s sequence length into the graph: the export's time axis
        is then the configured length, not dynamic."""
        if value.steps:
            self.fixed_steps = True

    def int64(self, name, values):
        """An int64 initializer (axes, shapes, indices)."""
        return self.constant(name, np.asarray(values, dtype=np.int64), np.int64)

    def reduce(self, value, op, name, axes, keepdims, **like):
        """``op`` (ReduceSum, ReduceMean, ...) over ``axes``: the axes an input from opset 13
        for ReduceSum and from opset 18 for the others, an attribute before."""
        if op == "ReduceSum" or self.opset >= 18:
            return self.op(value, op, name, [self.int64(f"{name}.axes", axes)],
                           keepdims=keepdims, **like)
        return self.op(value, op, name, axes=list(axes), keepdims=keepdims, **like)

    def scalar(self, name, value):
        return self.constant(name, np.array(value, dtype=np.float32))

    def node(self, op, inputs, name, **attributes):
        """One node of ``op`` on ``inputs`` (names); returns its output's name (``name``,
        made unique)."""
        out = self.unique(name)
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), [out],
                                                     name=self.unique(f"{out}/{op}"),
                                                     **attributes))
        return out

    def op(self, value, op, name, inputs=(), shape=None, layout=None, steps=None,
           **attributes):
        """``op`` on ``value`` then ``inputs``: a new :class:`Value` like ``value`` (but for
        the ``shape``, ``layout`` and ``steps`` given)."""
        out = self.node(op, [value.name, *inputs], name, **attributes)
        return value.like(out, shape, layout, steps)

    def to_layout(self, value, layout):
        """``value`` in ``layout``: a Transpose only when it is in the other one, and one per
        tensor however many layers (branches of a merge) ask for it."""
        if value.layout == layout or not value.is_image:
            return value
        key = (value.name, layout)
        if key not in self._transposed:
            perm = TO_NCHW if layout == NCHW else TO_NHWC
            self._transposed[key] = self.op(value, "Transpose", f"{value.name}.{layout}",
                                            layout=layout, perm=list(perm))
        return self._transposed[key]

    def channels_shaped(self, value, name, vector):
        """Initializer of a per-channel ``vector`` (C,) shaped to broadcast over ``value``'s
        channel axis: (C,) channels last, (C, 1, 1) for an NCHW image."""
        array = np.asarray(vector, dtype=np.float32)
        return self.constant(name, array.reshape(-1, 1, 1) if value.layout == NCHW else array)

    def need_opset(self, layer, version, what):
        """Refuse an export whose opset is older than ``version``, which ``what`` (e.g.
        "LayerNormalization") needs, naming the layer."""
        if self.opset < version:
            raise OnnxExportError(
                f"layer '{layer.name}' ({type(layer).__name__}) needs ONNX opset {version} or "
                f"newer for {what}; asked for opset {self.opset} (use --opset {version} or newer)")
