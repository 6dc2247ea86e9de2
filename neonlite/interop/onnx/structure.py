"""Containers (Sequential, the compound Affine / Conv / Deconv), residual merges (MergeSum,
SkipNode, MergeBroadcast) and the reshapes (Flatten, Reshape)."""
from ...layers import (Affine, BlockSparseAffine, CompoundLayer, Conv, Deconv, DeepBiLSTM,
                        DeepBiRNN, Flatten, MergeBroadcast, MergeSum, Reshape, Sequential,
                        SkipNode)
from .fold import export_folded, folds
from .graph import NHWC
from .registry import export_layer, exports


@exports(Sequential, CompoundLayer, Affine, Conv, Deconv, BlockSparseAffine, DeepBiRNN,
         DeepBiLSTM, opset=1)
def export_sequential(builder, layer, value):
    """Each layer on the one before's output; with ``builder.fold_bn``, a BatchNorm right
    after a Convolution or Linear is folded into it (``fold.py``)."""
    children, i = layer.layers, 0
    while i < len(children):
        if builder.fold_bn and i + 1 < len(children) and folds(children[i], children[i + 1]):
            value = export_folded(builder, children[i], children[i + 1], value)
            i += 2
            continue
        value = export_layer(builder, children[i], value)
        i += 1
    return value


@exports(SkipNode, opset=1)
def export_skip(builder, layer, value):
    """The identity: no node."""
    return value


def _branches(builder, layer, value):
    """The branches' outputs, all in the first one's layout."""
    outs = [export_layer(builder, branch, value) for branch in layer.branches]
    return [builder.to_layout(out, outs[0].layout) for out in outs]


@exports(MergeSum)
def export_merge_sum(builder, layer, value):
    """The sum of the branches' outputs (Sum)."""
    outs = _branches(builder, layer, value)
    return builder.op(outs[0], "Sum", layer.name, [out.name for out in outs[1:]],
                      shape=layer.out_shape)


@exports(MergeBroadcast)
def export_merge_broadcast(builder, layer, value):
    """Sum, or Concat along the last neonlite axis (channels; axis 1 of an NCHW image)."""
    if layer.merge == "sum":
        return export_merge_sum(builder, layer, value)
    outs = _branches(builder, layer, value)
    return builder.op(outs[0], "Concat", layer.name, [out.name for out in outs[1:]],
                      shape=layer.out_shape, axis=outs[0].channel_axis)


@exports(Reshape, Flatten)
def export_reshape(builder, layer, value):
    """(N, in_shape) -> (N, out_shape) in neonlite's order: the batch axis is copied from the
    input (a 0 in Reshape's shape), never written as a number."""
    x = builder.to_layout(value, NHWC)
    builder.fix_steps(x)
    if len(layer.out_shape) == 1:
        return builder.op(x, "Flatten", layer.name, shape=layer.out_shape, axis=1, steps=False)
    shape = builder.int64(f"{layer.name}.shape", (0,) + layer.out_shape)
    return builder.op(x, "Reshape", layer.name, [shape], shape=layer.out_shape, steps=False)
