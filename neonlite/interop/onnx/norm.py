"""BatchNorm (BatchNormalization, inference: the running statistics), LayerNorm
(LayerNormalization, opset 17), RMSNorm (elementary ops: ONNX's RMSNormalization is opset 23)
and LRN (the ONNX LRN op, odd depths)."""
import numpy as np

from ...layers import LRN, BatchNorm, LayerNorm, RMSNorm
from .dense import weights
from .errors import OnnxExportError
from .graph import NCHW, NHWC
from .registry import exports


def channels_second(builder, value, name):
    """``value`` with its channel axis at axis 1 (what BatchNormalization and LRN take) and
    the function that puts a result back: NCHW for an image, (N, C) as it is, a sequence
    (N, T, C) transposed to (N, C, T)."""
    if value.is_image:
        return builder.to_layout(value, NCHW), lambda out: out
    if len(value.shape) == 1:
        return value, lambda out: out
    if len(value.shape) != 2:
        raise OnnxExportError(f"layer '{name}': inputs of {len(value.shape)} axes per example "
                              f"cannot be normalized in ONNX yet")
    moved = builder.op(value, "Transpose", f"{name}.channels_second", perm=[0, 2, 1])
    return moved, lambda out: builder.op(out, "Transpose", f"{name}.channels_last",
                                         perm=[0, 2, 1])


@exports(BatchNorm)
def export_batchnorm(builder, layer, value):
    """y = gamma (x - running_mean) / sqrt(running_var + eps) + beta (+ the fused ReLU)."""
    x, back = channels_second(builder, value, layer.name)
    stats = [builder.constant(f"{layer.name}.gamma", weights(layer, "gamma")),
             builder.constant(f"{layer.name}.beta", weights(layer, "beta")),
             builder.constant(f"{layer.name}.running_mean", layer.running_mean.get()),
             builder.constant(f"{layer.name}.running_var", layer.running_var.get())]
    name = f"{layer.name}.bn" if layer.activation is not None else layer.name
    out = builder.op(x, "BatchNormalization", name, stats, epsilon=layer.eps)
    if layer.activation is not None:
        out = builder.op(out, "Relu", layer.name)
    return back(out)


@exports(LayerNorm, opset=17)
def export_layernorm(builder, layer, value):
    """LayerNormalization over the last axis (neonlite's order), biased variance as neonlite's."""
    x = builder.to_layout(value, "nhwc")
    beta = weights(layer, "beta") if layer.bias else np.zeros(layer.D, np.float32)
    inputs = [builder.constant(f"{layer.name}.gamma", weights(layer, "gamma")),
              builder.constant(f"{layer.name}.beta", beta)]
    return builder.op(x, "LayerNormalization", layer.name, inputs, axis=-1, epsilon=layer.eps)


@exports(RMSNorm)
def export_rmsnorm(builder, layer, value):
    """y = gamma * x / sqrt(mean(x^2 over the last axis) + eps), in neonlite's order."""
    name = layer.name
    x = builder.to_layout(value, NHWC)
    square = builder.op(x, "Mul", f"{name}.square", [x.name])
    mean = builder.reduce(square, "ReduceMean", f"{name}.mean_square", [-1], keepdims=1)
    shifted = builder.op(mean, "Add", f"{name}.plus_eps", [builder.scalar(f"{name}.eps",
                                                                          layer.eps)])
    rms = builder.op(shifted, "Sqrt", f"{name}.rms")
    normed = builder.op(x, "Div", f"{name}.normed", [rms.name])
    gamma = builder.constant(f"{name}.gamma", weights(layer, "gamma"))
    return builder.op(normed, "Mul", name, [gamma])


@exports(LRN)
def export_lrn(builder, layer, value):
    """y = x / (k + alpha/depth * sum of x^2 over the window)^beta.  ONNX's window of channel c
    is c - (depth-1)//2 .. c + depth//2, neonlite's (and PyTorch's) c - depth//2 ..
    c + (depth-1)//2: the same for an odd depth, which is what exports."""
    if layer.depth % 2 == 0:
        raise OnnxExportError(f"layer '{layer.name}' (LRN): depth {layer.depth} is even; ONNX's "
                              f"LRN centres an even window one channel later than neonlite, so "
                              f"only odd depths export")
    x, back = channels_second(builder, value, layer.name)
    extra = [] if value.is_image else list(range(len(value.shape) + 1, 4))
    if extra:  # ONNX Runtime's LRN takes (N, C, H, W) only
        axes = builder.constant(f"{layer.name}.axes", np.array(extra, np.int64), np.int64)
        x = builder.op(x, "Unsqueeze", f"{layer.name}.as_image", [axes])
    out = builder.op(x, "LRN", f"{layer.name}.lrn" if extra else layer.name, size=layer.depth,
                     alpha=layer.alpha, beta=layer.beta, bias=layer.k)
    if extra:
        out = builder.op(out, "Squeeze", layer.name, [axes])
    return back(out)
