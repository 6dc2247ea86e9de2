"""Linear (MatMul) and Bias (Add) layers."""
from ...layers import Bias, Linear
from .graph import NHWC
from .registry import exports


def weights(layer, attr):
    """The float32 numpy array of ``layer``'s parameter ``attr`` (e.g. "W")."""
    return getattr(layer, attr).value.get()


@exports(Linear)
def export_linear(builder, layer, value):
    """y = x @ W: a sequence (N, T, D) per token (T stays dynamic), any other input flattened
    to (N, nin) in neonlite's order first (Flatten(axis=1): no batch size in the graph)."""
    x = builder.to_layout(value, NHWC)
    if not layer.per_token and len(x.shape) != 1:
        builder.fix_steps(x)
        x = builder.op(x, "Flatten", f"{layer.name}.flat", shape=(layer.nin,), axis=1,
                       steps=False)
    w = builder.parameter(layer.W)
    return builder.op(x, "MatMul", layer.name, inputs=[w], shape=layer.out_shape)


@exports(Bias)
def export_bias(builder, layer, value):
    """y = x + b, b (C,) over the channel axis, in whichever layout ``value`` is."""
    b = builder.channels_shaped(value, layer.b.name, weights(layer, "b"))
    return builder.op(value, "Add", f"{layer.name}.bias", inputs=[b])
