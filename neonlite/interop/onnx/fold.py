"""BatchNorm folded into the convolution or linear layer before it (``fold_bn=True``,
``neonlite export --fold-bn``): one Conv (or MatMul + Add) instead of the layer and a
BatchNormalization node, as inference engines prefer.

With s = gamma / sqrt(running_var + eps) per output channel k, the folded layer computes
x W' + b' with W'[..., k] = W[..., k] s[k] and b' = (b - running_mean) s + beta (b = 0 when
the layer has no bias), in float64 and then rounded to float32 once; the batch norm's fused
ReLU follows.  A pair folds when the BatchNorm comes right after a Convolution or Linear
with no activation of its own, in the same container (``Conv(..., batch_norm=True)`` and
``Affine(..., batch_norm=True)`` are such pairs); any other BatchNorm is written as
BatchNormalization.
"""
import numpy as np

from ...layers import BatchNorm, Convolution, Linear
from .dense import matmul, weights
from .image import convolution_node


def folds(layer, following):
    """Whether ``following`` (the next layer of a container) is a BatchNorm that folds into
    ``layer``."""
    return isinstance(following, BatchNorm) and (
        type(layer) is Convolution and layer.activation is None or type(layer) is Linear)


def folded_weights(layer, bn):
    """(W', b') of ``layer`` with batch norm ``bn`` folded in (see the module's docstring),
    W' in neonlite's layout (output channels last)."""
    scale = weights(bn, "gamma").astype(np.float64) / np.sqrt(
        bn.running_var.get().astype(np.float64) + bn.eps)
    W = weights(layer, "W").astype(np.float64) * scale
    b = getattr(layer, "b", None)
    b = np.zeros_like(scale) if b is None else b.value.get().astype(np.float64)
    b = (b - bn.running_mean.get().astype(np.float64)) * scale + weights(bn, "beta")
    return W.astype(np.float32), b.astype(np.float32)


def export_folded(builder, layer, bn, value):
    """The graph of ``layer`` followed by batch norm ``bn``, folded, and ``bn``'s ReLU."""
    W, b = folded_weights(layer, bn)
    fused = bn.activation is not None
    name = f"{bn.name}.folded" if fused else bn.name
    if isinstance(layer, Convolution):
        out = convolution_node(builder, layer, value, W, b, name)
    else:
        out = matmul(builder, layer, value, builder.constant(f"{layer.name}.W_folded", W))
        out = builder.op(out, "Add", name, [builder.constant(f"{bn.name}.b_folded", b)])
    return builder.op(out, "Relu", bn.name) if fused else out
