"""Convolution (Conv), Deconvolution (ConvTranspose) and Pooling (MaxPool, AveragePool).

neonlite's images are NHWC with filters (R, S, C, K) (deconvolution: (R, S, K, C)); ONNX's
are NCHW with filters (K, C, R, S) (ConvTranspose: (C, K, R, S)).  The exporter transposes the
filters once, at export, and the activations only where the layout changes (``graph.py``).
"""

from ...layers import Convolution, Deconvolution, Pooling
from ...layers.conv import _pair
from .activation import apply_transform
from .dense import weights
from .graph import NCHW
from .registry import exports


def _geometry(layer, strides_default=None):
    """ONNX's ``strides`` and ``pads`` ([top, left, bottom, right]) of a conv/pool layer."""
    stride = _pair(layer.strides if layer.strides else strides_default, "strides", layer.name)
    pad = _pair(layer.padding, "padding", layer.name, minimum=0)
    return list(stride), [pad[0], pad[1], pad[0], pad[1]]


def _filtered(builder, layer, value, op, W=None, b=None, name=None, **attributes):
    """``op`` (Conv or ConvTranspose) of ``layer`` on the image in NCHW, with the filters
    transposed ((R, S, C, K) or (R, S, K, C) -> (3, 2, 0, 1)) and the bias when there is one
    (``W`` / ``b``: other values, as a folded batch norm gives); the output is named
    ``name``, else after the layer unless an activation follows."""
    x = builder.to_layout(value, NCHW)
    R, S, K = layer.fshape
    strides, pads = _geometry(layer)
    W = weights(layer, "W") if W is None else W
    inputs = [builder.constant(f"{layer.name}.W", W.transpose(3, 2, 0, 1))]
    if b is None and layer.b is not None:
        b = weights(layer, "b")
    if b is not None:
        inputs.append(builder.constant(f"{layer.name}.b", b))
    if name is None:
        name = f"{layer.name}.{op.lower()}" if layer.activation is not None else layer.name
    return builder.op(x, op, name, inputs, shape=layer.out_shape, kernel_shape=[R, S],
                      strides=strides, pads=pads,
                      dilations=list(_pair(layer.dilation, "dilation", layer.name)),
                      **attributes)


def convolution_node(builder, layer, value, W, b, name):
    """The Conv of Convolution ``layer`` with filters ``W`` (R, S, C, K) and bias ``b`` (K,)
    in its place (a batch norm folded in), output ``name``."""
    return _filtered(builder, layer, value, "Conv", W=W, b=b, name=name)


@exports(Convolution)
def export_convolution(builder, layer, value):
    """Conv (+ the fused bias and ReLU) on the image in NCHW."""
    out = _filtered(builder, layer, value, "Conv")
    if layer.activation is not None:
        out = builder.op(out, "Relu", layer.name)
    return out


@exports(Deconvolution)
def export_deconvolution(builder, layer, value):
    """ConvTranspose (+ the fused bias and activation) on the image in NCHW."""
    out = _filtered(builder, layer, value, "ConvTranspose", output_padding=list(
        _pair(layer.output_padding, "output_padding", layer.name, minimum=0)))
    if layer.activation is not None:
        out = apply_transform(builder, layer.activation, out, layer.name, layer)
    return out


@exports(Pooling)
def export_pooling(builder, layer, value):
    """MaxPool / AveragePool on the image in NCHW.  Padded positions never win a max (ONNX
    pads MaxPool with -inf) and are not counted in an average (``count_include_pad=0``, as
    neonlite's average divides by the window's positions inside the image)."""
    x = builder.to_layout(value, NCHW)
    R, S = _pair(layer.fshape, "fshape", layer.name)
    strides, pads = _geometry(layer, strides_default=(R, S))
    if layer.op == "max":
        return builder.op(x, "MaxPool", layer.name, shape=layer.out_shape, kernel_shape=[R, S],
                          strides=strides, pads=pads)
    return builder.op(x, "AveragePool", layer.name, shape=layer.out_shape, kernel_shape=[R, S],
                      strides=strides, pads=pads, count_include_pad=0)
