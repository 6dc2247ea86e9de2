"""The ONNX operators import reads, each as neonlite layers on NHWC batches.

Every converter is ``convert(ctx, node, value) -> (layers, value)`` (``ctx``: the
:class:`~.importer.Importer`, ``value``: a :class:`Tensor`).  ONNX images are NCHW with
filters (K, C, R, S); neonlite's are NHWC with filters (R, S, C, K): weights are transposed
here, once, and the layout never appears in the model.  A ``Flatten`` of NCHW features gives
the values in (C, H, W) order where neonlite's Flatten gives (H, W, C): the tensor records the
permutation (``Tensor.order``) and the next Gemm / MatMul takes its weight rows in neonlite's
order, so no layer moves data.  Elementwise layers keep the order; any other layer on such a
vector is refused.
"""
import numpy as np

from ...initializers import Constant
from ...layers import (Activation, BatchNorm, Bias, Convolution, Dropout, Flatten, Linear,
                       Pooling, Reshape)
from ...transforms.activation import Gelu, Logistic, Rectlin, Softmax, Tanh
from .errors import OnnxImportError


NCHW, NHWC = "nchw", "nhwc"


class Tensor:
    """What import knows of a tensor: its neonlite per-example ``shape`` (images (H, W, C)),
    the ``layout`` of an image in the ONNX graph (NCHW, ONNX's own; NHWC where the graph
    transposed to it, as neonlite's own exports do: a ``Transpose`` is a change of label,
    never a layer) and, for a vector flattened from NCHW features, ``order``: entry i of the
    ONNX vector is entry ``order[i]`` of neonlite's (None: the same order)."""

    def __init__(self, shape, order=None, layout=NCHW):
        self.shape, self.order = tuple(int(d) for d in shape), order
        self.layout = layout

    @property
    def is_image(self):
        return len(self.shape) == 3

    @property
    def channel_axis(self):
        """The ONNX axis (batch included) of the channels."""
        return 1 if self.is_image and self.layout == NCHW else len(self.shape)

    def onnx_shape(self):
        """The per-example shape as ONNX sees it (NCHW images (C, H, W))."""
        if self.is_image and self.layout == NCHW:
            return (self.shape[2],) + self.shape[:2]
        return self.shape


def _pairs(ctx, node, attrs, key, default):
    value = list(attrs.get(key, default))
    if len(value) != 2:
        ctx.fail(node, f"{key} {value} is not a pair; import takes 2-D images only")
    return value


def _padding(ctx, node, attrs, kernel, strides, dilations, value):
    """neonlite's symmetric (pad_h, pad_w) of ONNX's ``pads`` / ``auto_pad``."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return (0, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(value.onnx_shape()[1:], kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            if total % 2:
                ctx.fail(node, f"auto_pad {auto} pads one side more than the other "
                               f"({total} in all); neonlite pads both sides alike")
            pads.append(total // 2)
        return tuple(pads)
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4 or pads[:2] != pads[2:] or min(pads) < 0:
        ctx.fail(node, f"pads {pads} are not the same at the start and end of each axis; "
                       f"neonlite pads both sides alike")
    return tuple(pads[:2])


def _need_image(ctx, node, value):
    if not value.is_image or value.layout != NCHW:
        ctx.fail(node, f"takes an NCHW image, got a tensor of per-example shape "
                       f"{value.onnx_shape()}{' (NHWC)' if value.is_image else ''}")


def conv(ctx, node, value):
    """Conv -> Convolution (filters (K, C, R, S) -> (R, S, C, K); the bias fused)."""
    _need_image(ctx, node, value)
    attrs = ctx.attrs(node)
    W = ctx.const(node, 1, "the filters")
    if W.ndim != 4 or W.shape[1] != value.shape[2]:
        ctx.fail(node, f"filters of shape {list(W.shape)} do not fit an input of "
                       f"{value.shape[2]} channels (expected (K, {value.shape[2]}, R, S))")
    if attrs.get("group", 1) != 1:
        ctx.fail(node, f"group {attrs['group']}: grouped convolutions are not supported")
    K, _, R, S = W.shape
    strides = _pairs(ctx, node, attrs, "strides", [1, 1])
    dilations = _pairs(ctx, node, attrs, "dilations", [1, 1])
    padding = _padding(ctx, node, attrs, (R, S), strides, dilations, value)
    bias = ctx.const(node, 2, "the bias") if len(node.input) > 2 and node.input[2] else None
    layer = Convolution((R, S, K), strides=tuple(strides), padding=padding,
                        dilation=tuple(dilations), name=ctx.layer_name(node),
                        bias=None if bias is None else Constant(0.0),
                        activation=Rectlin() if ctx.fuses_relu(node) else None)
    weights = {"W": W.transpose(2, 3, 1, 0)}
    if bias is not None:
        weights["b"] = ctx.vector(node, bias, K, "the bias")
    ctx.set_weights(layer, weights)
    P = (value.shape[0] + 2 * padding[0] - dilations[0] * (R - 1) - 1) // strides[0] + 1
    Q = (value.shape[1] + 2 * padding[1] - dilations[1] * (S - 1) - 1) // strides[1] + 1
    return [layer], Tensor((P, Q, K))


def batch_norm(ctx, node, value):
    """BatchNormalization (inference form) -> BatchNorm with the running statistics."""
    attrs = ctx.attrs(node)
    if attrs.get("training_mode", 0):
        ctx.fail(node, "training_mode=1; import takes the inference form")
    ctx.only_first_output(node)
    _plain_order(ctx, node, value)
    if value.is_image:
        _need_image(ctx, node, value)
    elif len(value.shape) != 1:
        ctx.fail(node, f"takes (N, C) or NCHW tensors, got per-example shape "
                       f"{value.onnx_shape()}")
    C = value.shape[-1]
    stats = [ctx.vector(node, ctx.const(node, i, what), C, what)
             for i, what in enumerate(("scale", "bias", "mean", "variance"), start=1)]
    momentum = float(attrs.get("momentum", 0.9))
    layer = BatchNorm(rho=momentum if 0.0 <= momentum < 1.0 else 0.9,
                      eps=float(attrs.get("epsilon", 1e-5)), name=ctx.layer_name(node),
                      activation=Rectlin() if ctx.fuses_relu(node) else None)
    ctx.set_weights(layer, dict(zip(("gamma", "beta", "running_mean", "running_var"), stats)))
    return [layer], value


def _activation(transform):
    def convert(ctx, node, value):
        return [Activation(transform(ctx.attrs(node)), name=ctx.layer_name(node))], value
    return convert


def relu(ctx, node, value):
    """Relu -> Activation(Rectlin()), or nothing where the Conv or BatchNormalization before
    it took it into its own pass (``ctx.fuses_relu``)."""
    if ctx.fused(node):
        return [], value
    return [Activation(Rectlin(), name=ctx.layer_name(node))], value


def softmax(ctx, node, value):
    """Softmax over the channels (the last neonlite axis): axis 1 of (N, D) or of NCHW."""
    default = -1 if ctx.opset >= 13 else 1
    axis = ctx.attrs(node).get("axis", default)
    rank = len(value.shape) + 1
    if axis % rank != value.channel_axis:
        ctx.fail(node, f"axis {axis} is not the channel axis; neonlite's Softmax runs over "
                       f"channels (axis 1 of NCHW, the last axis otherwise)")
    if value.is_image and value.layout == NCHW and ctx.opset < 13:
        ctx.fail(node, f"at opset {ctx.opset}, Softmax over axis 1 of an image spans C, H and "
                       f"W together; neonlite's runs over channels")
    return [Activation(Softmax(), name=ctx.layer_name(node))], value


def identity(ctx, node, value):
    """Identity: no layer."""
    return [], value


def dropout(ctx, node, value):
    """Dropout(ratio) -> Dropout(keep = 1 - ratio), the identity at inference; none when the
    ratio is 0."""
    ctx.only_first_output(node)
    attrs = ctx.attrs(node)
    if len(node.input) > 1 and node.input[1]:
        ratio = float(ctx.const(node, 1, "the ratio").reshape(-1)[0])
    else:
        ratio = float(attrs.get("ratio", 0.5))
    if not 0.0 <= ratio < 1.0:
        ctx.fail(node, f"ratio {ratio} is outside [0, 1)")
    return ([Dropout(keep=1.0 - ratio, name=ctx.layer_name(node))] if ratio else []), value


def pool(ctx, node, value):
    """MaxPool / AveragePool -> Pooling (floor sizes; padding never counted in an average)."""
    _need_image(ctx, node, value)
    ctx.only_first_output(node)
    attrs = ctx.attrs(node)
    kernel = _pairs(ctx, node, attrs, "kernel_shape", [])
    strides = _pairs(ctx, node, attrs, "strides", [1, 1])
    if list(attrs.get("dilations", [1, 1])) != [1, 1] or attrs.get("storage_order", 0):
        ctx.fail(node, "dilated or column-major pooling is not supported")
    padding = _padding(ctx, node, attrs, kernel, strides, (1, 1), value)
    op = "max" if node.op_type == "MaxPool" else "avg"
    if op == "avg" and attrs.get("count_include_pad", 0) and any(padding):
        ctx.fail(node, "count_include_pad=1 with padding; neonlite's average counts only the "
                       "positions inside the image")
    sizes = []
    for size, k, s, p in zip(value.shape[:2], kernel, strides, padding):
        floor = (size + 2 * p - k) // s + 1
        if attrs.get("ceil_mode", 0) and -(-(size + 2 * p - k) // s) + 1 != floor:
            ctx.fail(node, "ceil_mode=1 gives a larger output than neonlite's pooling here")
        sizes.append(floor)
    layer = Pooling(tuple(kernel), strides=tuple(strides), padding=padding, op=op,
                    name=ctx.layer_name(node))
    return [layer], Tensor(sizes + [value.shape[2]])


def global_pool(ctx, node, value):
    """GlobalAveragePool / GlobalMaxPool -> Pooling over the whole image: (1, 1, C)."""
    _need_image(ctx, node, value)
    H, W, C = value.shape
    op = "max" if node.op_type == "GlobalMaxPool" else "avg"
    return [Pooling((H, W), strides=(H, W), op=op, name=ctx.layer_name(node))], \
        Tensor((1, 1, C))


def _flattened(ctx, node, value):
    """Flatten to (N, D): the layer and the vector's order (see the module's docstring)."""
    if len(value.shape) == 1:
        return [], value
    if not value.is_image:
        _plain_order(ctx, node, value)
        return [Flatten(name=ctx.layer_name(node))], Tensor((int(np.prod(value.shape)),))
    H, W, C = value.shape
    order = None if H * W == 1 or value.layout == NHWC else np.arange(H * W * C).reshape(H, W, C).transpose(
        2, 0, 1).ravel()
    return [Flatten(name=ctx.layer_name(node))], Tensor((H * W * C,), order)


def flatten(ctx, node, value):
    axis = ctx.attrs(node).get("axis", 1)
    if axis != 1:
        ctx.fail(node, f"axis {axis}: import flattens everything after the batch axis "
                       f"(axis 1) only")
    return _flattened(ctx, node, value)


def reshape(ctx, node, value):
    """Reshape with a constant shape: to (N, D) a Flatten; to the shape it has, nothing; a
    vector to (N, ...) a Reshape."""
    shape = [int(s) for s in ctx.const(node, 1, "the shape").reshape(-1)]
    here = value.onnx_shape()
    if not shape:
        ctx.fail(node, "reshapes to a scalar; the batch axis must stay")
    target = [here[i - 1] if s == 0 and 0 < i <= len(here) else s
              for i, s in enumerate(shape)][1:]
    size = int(np.prod(here))
    if target.count(-1) > 1 or any(s < -1 or s == 0 for s in target):
        ctx.fail(node, f"shape {shape} cannot be read per example")
    if -1 in target:
        known = int(np.prod([s for s in target if s != -1]))
        target[target.index(-1)] = size // known if known and size % known == 0 else -2
    if int(np.prod(target)) != size or -2 in target:
        ctx.fail(node, f"shape {shape} does not hold the {size} values of each example "
                       f"(batch axis first)")
    if tuple(target) == here:
        return [], value
    if len(target) == 1:
        return _flattened(ctx, node, value)
    if (value.is_image and value.layout == NCHW) or value.order is not None:
        ctx.fail(node, f"reshapes per-example shape {here} to {tuple(target)}; only a reshape "
                       f"to (N, D) of an NCHW image is expressible (its order is not NHWC's)")
    return [Reshape(tuple(target), name=ctx.layer_name(node))], Tensor(target)


def _linear(ctx, node, value, W, bias):
    """x W (+ bias) on (N, nin) for W (nin, nout), rows put in neonlite's order."""
    if len(value.shape) != 1 or W.ndim != 2 or W.shape[0] != value.shape[0]:
        ctx.fail(node, f"weights {list(W.shape)} do not fit an input of per-example shape "
                       f"{value.onnx_shape()} (expected (N, nin) @ (nin, nout))")
    if value.order is not None:
        rows = np.empty_like(W)
        rows[value.order] = W
        W = rows
    name = ctx.layer_name(node)
    layer = Linear(W.shape[1], name=name)
    ctx.set_weights(layer, {"W": W})
    layers = [layer]
    if bias is not None:
        layers.append(_bias(ctx, node, Tensor((W.shape[1],)), bias, name))
    return layers, Tensor((W.shape[1],))


def gemm(ctx, node, value):
    """Gemm (alpha A B' + beta C, transA=0) -> Linear + Bias."""
    attrs = ctx.attrs(node)
    if attrs.get("transA", 0):
        ctx.fail(node, "transA=1: the data input must be (N, nin)")
    W = ctx.const(node, 1, "the weights").astype(np.float32)
    W = W.T if attrs.get("transB", 0) else W
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    W = W if alpha == 1.0 else (W * alpha).astype(np.float32)
    bias = None
    if len(node.input) > 2 and node.input[2]:
        bias = ctx.const(node, 2, "the bias").astype(np.float32)
        bias = bias if beta == 1.0 else (bias * beta).astype(np.float32)
    return _linear(ctx, node, value, W, bias)


def matmul(ctx, node, value):
    """MatMul by a constant (nin, nout) -> Linear."""
    return _linear(ctx, node, value, ctx.const(node, 1, "the weights"), None)


def _bias(ctx, node, value, constant, name):
    """A Bias layer (named ``name``, or after the node) adding ``constant`` per channel:
    a scalar, (C,) / (1, C) on vectors, (C, 1, 1) / (1, C, 1, 1) on NCHW images."""
    C = value.shape[-1]
    array = np.asarray(constant, np.float32)
    shape = list(array.shape)
    while len(shape) > 1 and shape[0] == 1:
        shape.pop(0)
    want = [C, 1, 1] if value.is_image and value.layout == NCHW else [C]
    if array.size == 1 and array.ndim <= len(value.shape) + 1:
        b = np.full(C, array.reshape(-1)[0], np.float32)
    elif shape == want and array.ndim <= len(value.shape) + 1:
        b = array.reshape(-1)
    else:
        ctx.fail(node, f"adds a constant of shape {list(array.shape)}; import takes a "
                       f"per-channel bias of shape {want} (or a scalar)")
    if value.order is not None:
        b = b[np.argsort(value.order)]
    layer = Bias(name=name or ctx.layer_name(node))
    ctx.set_weights(layer, {"b": b})
    return layer


def add_constant(ctx, node, value):
    """Add of a constant per-channel vector -> Bias."""
    constant = next(ctx.graph.constants[i] for i in node.input if i in ctx.graph.constants)
    return [_bias(ctx, node, value, constant, None)], value


def transpose(ctx, node, value):
    """Transpose of an image between NCHW and NHWC: a new label, no layer."""
    perm = list(ctx.attrs(node).get("perm", []))
    moves = {NHWC: ([0, 3, 1, 2], NCHW), NCHW: ([0, 2, 3, 1], NHWC)}
    if not value.is_image or perm != moves[value.layout][0]:
        ctx.fail(node, f"perm {perm} on per-example shape {value.onnx_shape()}: import takes "
                       f"transposes of images between NCHW and NHWC only")
    return [], Tensor(value.shape, layout=moves[value.layout][1])


def _plain_order(ctx, node, value):
    if value.order is not None:
        ctx.fail(node, "runs on a vector flattened from NCHW features, whose order neonlite's "
                       "NHWC layers do not keep; only elementwise layers and Gemm/MatMul may "
                       "follow such a Flatten")


def _gelu(attrs):
    approximate = attrs.get("approximate", b"none")
    return Gelu(approximate.decode() if isinstance(approximate, bytes) else approximate)


OPS = {
    "Conv": conv, "BatchNormalization": batch_norm,
    "Relu": relu,
    "LeakyRelu": _activation(lambda a: Rectlin(slope=float(a.get("alpha", 0.01)))),
    "Sigmoid": _activation(lambda a: Logistic()), "Tanh": _activation(lambda a: Tanh()),
    "Gelu": _activation(_gelu), "Softmax": softmax,
    "Identity": identity, "Dropout": dropout,
    "MaxPool": pool, "AveragePool": pool,
    "GlobalAveragePool": global_pool, "GlobalMaxPool": global_pool,
    "Flatten": flatten, "Reshape": reshape, "Transpose": transpose,
    "Gemm": gemm, "MatMul": matmul, "Add": add_constant, "Sum": add_constant,
}
