"""Activation layers (every transform) and Dropout (the identity in inference: no node)."""
import math

from ...layers import Activation, Dropout
from ...transforms.activation import Gelu, Identity, Logistic, Rectlin, Softmax, Tanh
from .errors import OnnxExportError
from .graph import NHWC
from .registry import exports

SQRT_HALF = math.sqrt(0.5)
TANH_K = math.sqrt(2.0 / math.pi)


def apply_transform(builder, transform, value, name, layer):
    """``transform`` (a ``neonlite.transforms`` activation) on ``value`` as ONNX nodes."""
    if isinstance(transform, Rectlin):
        if transform.slope:
            return builder.op(value, "LeakyRelu", name, alpha=transform.slope)
        return builder.op(value, "Relu", name)
    if isinstance(transform, Logistic):
        return builder.op(value, "Sigmoid", name)
    if isinstance(transform, Tanh):
        return builder.op(value, "Tanh", name)
    if isinstance(transform, Identity):
        return builder.op(value, "Identity", name)
    if isinstance(transform, Softmax):
        x = builder.to_layout(value, NHWC)
        return builder.op(x, "Softmax", name, axis=-1)
    if isinstance(transform, Gelu):
        return gelu(builder, value, name, transform.approximate)
    raise OnnxExportError(f"layer '{layer.name}': the activation {transform!r} cannot be "
                          f"exported to ONNX yet")


def gelu(builder, value, name, approximate):
    """GELU as neonlite computes it (``backends/shared/gelu.py``), op for op:
    0.5 x (1 + erf(x sqrt(1/2))), or with ``approximate="tanh"``
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  Written as elementary ops, not the
    opset-20 Gelu, so every opset computes the same formula."""
    half, one = builder.scalar(f"{name}.half", 0.5), builder.scalar(f"{name}.one", 1.0)
    if approximate == "tanh":
        cx = builder.op(value, "Mul", f"{name}.cx", [builder.scalar(f"{name}.c", 0.044715)])
        cubic = builder.op(builder.op(cx, "Mul", f"{name}.cx2", [value.name]), "Mul",
                           f"{name}.cx3", [value.name])
        inner = builder.op(value, "Add", f"{name}.inner", [cubic.name])
        scaled = builder.op(inner, "Mul", f"{name}.scaled", [builder.scalar(f"{name}.k", TANH_K)])
        core = builder.op(scaled, "Tanh", f"{name}.tanh")
    else:
        scaled = builder.op(value, "Mul", f"{name}.scaled",
                            [builder.scalar(f"{name}.sqrt_half", SQRT_HALF)])
        core = builder.op(scaled, "Erf", f"{name}.erf")
    gate = builder.op(core, "Add", f"{name}.gate", [one])
    halved = builder.op(value, "Mul", f"{name}.half_x", [half])
    return builder.op(halved, "Mul", name, [gate.name])


@exports(Activation)
def export_activation(builder, layer, value):
    return apply_transform(builder, layer.transform, value, layer.name, layer)


@exports(Dropout, opset=1)
def export_dropout(builder, layer, value):
    """Inference dropout is the identity: the layer writes nothing."""
    return value
