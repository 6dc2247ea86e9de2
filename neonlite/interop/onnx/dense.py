"""Linear (MatMul) and Bias (Add) layers, and the block-sparse BlockSparseLinear, written as a
dense MatMul whose weight has the layout's absent blocks as zeros."""
from ...layers import BlockSparseLinear, Bias, Linear
from .graph import NHWC
from .registry import exports


def weights(layer, attr):
    """The float32 numpy array of ``layer``'s parameter ``attr`` (e.g. "W")."""
    return getattr(layer, attr).value.get()


def matmul(builder, layer, value, weight):
    """x @ weight (an initializer (nin, nout)): a sequence (N, T, D) per token (T stays
    dynamic), any other input flattened to (N, nin) in neonlite's order first (Flatten(axis=1):
    no batch size in the graph), as Linear and BlockSparseLinear take their input."""
    x = builder.to_layout(value, NHWC)
    if not layer.per_token and len(x.shape) != 1:
        builder.fix_steps(x)
        x = builder.op(x, "Flatten", f"{layer.name}.flat", shape=(layer.nin,), axis=1,
                       steps=False)
    return builder.op(x, "MatMul", layer.name, inputs=[weight], shape=layer.out_shape)


@exports(Linear)
def export_linear(builder, layer, value):
    """y = x @ W."""
    return matmul(builder, layer, value, builder.parameter(layer.W))


@exports(BlockSparseLinear)
def export_blocksparse_linear(builder, layer, value):
    """y = x @ W with W dense (nin, nout), zeros outside the layout (initializer
    ``<layer>.W_dense``): ONNX has no block-sparse MatMul."""
    return matmul(builder, layer, value,
                  builder.constant(f"{layer.name}.W_dense", layer.dense_weight()))


@exports(Bias)
def export_bias(builder, layer, value):
    """y = x + b, b (C,) over the channel axis, in whichever layout ``value`` is."""
    b = builder.channels_shaped(value, layer.b.name, weights(layer, "b"))
    return builder.op(value, "Add", f"{layer.name}.bias", inputs=[b])
