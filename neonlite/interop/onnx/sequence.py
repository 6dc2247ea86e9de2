"""Sequence layers: Embedding (Gather, and the padding mask), SegmentEmbedding (Gather of a
second graph input), PositionalEmbedding (Add of the table's first T rows, T read from the
input), TiedLinear (MatMul by the shared table's transpose), the reductions RecurrentLast /
RecurrentSum / RecurrentMean and MeanPool over the time axis, and L2Normalize. None writes the
sequence length into the graph."""
from ...layers import (Embedding, FirstToken, L2Normalize, MeanPool, PositionalEmbedding,
                       RecurrentLast, RecurrentMean, RecurrentSum, SegmentEmbedding, TiedLinear)
from .errors import OnnxExportError
from .graph import NHWC, Value
from .registry import exports

FLOAT, INT64 = 1, 7  # onnx.TensorProto.FLOAT, INT64


@exports(Embedding)
def export_embedding(builder, layer, value):
    """ids (N, T) float -> int64 -> Gather(W (vocab, d), ids) (N, T, d).  With a ``pad_id``
    the padding mask (N, T), 1 at real tokens, for the layers that use it."""
    ids = builder.op(value, "Cast", f"{layer.name}.ids", to=INT64)
    if layer.pad_id is not None:
        pad = builder.int64(f"{layer.name}.pad_id", layer.pad_id)
        pads = builder.op(ids, "Equal", f"{layer.name}.is_pad", [pad])
        real = builder.op(pads, "Not", f"{layer.name}.is_real")
        builder.key_mask = builder.op(real, "Cast", f"{layer.name}.key_mask", to=FLOAT)
    out = builder.node("Gather", [builder.parameter(layer.W), ids.name], layer.name, axis=0)
    return value.like(out, shape=layer.out_shape)


def steps_of(builder, value, name):
    """A 1-D int64 tensor [T]: the time axis's length of a sequence ``value`` (N, T, ...)."""
    shape = builder.op(value, "Shape", f"{name}.shape")
    return builder.node("Gather", [shape.name, builder.int64(f"{name}.time_axis", [1])],
                        f"{name}.steps", axis=0)


@exports(PositionalEmbedding)
def export_positional(builder, layer, value):
    """y = x + P[:T], T the input's length (dynamic), P learned (``W``) or sinusoidal."""
    table = builder.constant(f"{layer.name}.table", layer.table.get()) if layer.sinusoidal \
        else builder.parameter(layer.W)
    zero, axis = builder.int64(f"{layer.name}.start", [0]), builder.int64(f"{layer.name}.axis",
                                                                           [0])
    rows = builder.node("Slice", [table, zero, steps_of(builder, value, layer.name), axis],
                        f"{layer.name}.rows")
    return builder.op(value, "Add", layer.name, [rows])


@exports(SegmentEmbedding)
def export_segment_embedding(builder, layer, value):
    """y = x + W[s] with the segment ids s (N, T) a second graph input
    ``<layer>.segment_ids`` (floats, as neonlite's ids; all zeros: neonlite's default of
    every token in segment 0)."""
    ids = Value(builder.unique(f"{layer.name}.segment_ids"), value.shape[:1], steps=value.steps)
    builder.extra_inputs.append(ids)
    index = builder.op(ids, "Cast", f"{layer.name}.segment_index", to=INT64)
    rows = builder.node("Gather", [builder.parameter(layer.W), index.name],
                        f"{layer.name}.rows", axis=0)
    return builder.op(value, "Add", layer.name, [rows])


@exports(TiedLinear)
def export_tied_linear(builder, layer, value):
    """y = x @ E^T with E the tied Embedding's table (one initializer for both)."""
    table = builder.node("Transpose", [builder.parameter(layer.table)], f"{layer.name}.E_T",
                         perm=[1, 0])
    return builder.op(value, "MatMul", layer.name, [table], shape=layer.out_shape)


@exports(RecurrentLast)
def export_recurrent_last(builder, layer, value):
    """y = x[:, -1] (the last step of whatever length the sequence has); with the padding mask
    m of an Embedding with a pad_id, the step of each sequence's last real token: weights
    m[t] - m[t + 1] (m[T] = 0), as neonlite's."""
    if layer.key_mask is None:
        last = builder.int64(f"{layer.name}.last", -1)
        return builder.op(value, "Gather", layer.name, [last], shape=layer.out_shape,
                          steps=False, axis=1)
    mask = padding_mask(builder, layer)
    later = builder.node("Slice", [mask.name, builder.int64(f"{layer.name}.from", [1]),
                                   builder.int64(f"{layer.name}.to", [2 ** 62]),
                                   builder.int64(f"{layer.name}.steps_axis", [1])],
                         f"{layer.name}.mask_later")
    later = builder.node("Pad", [later, builder.int64(f"{layer.name}.pads", [0, 0, 0, 1])],
                         f"{layer.name}.mask_next")
    weights = builder.op(mask, "Sub", f"{layer.name}.weights", [later])
    return weighted_sum_over_time(builder, layer, value, weights)


@exports(FirstToken)
def export_first_token(builder, layer, value):
    """y = x[:, 0] (BERT's [CLS] state, which its pooler projects)."""
    first = builder.int64(f"{layer.name}.first", 0)
    return builder.op(value, "Gather", layer.name, [first], shape=layer.out_shape, steps=False,
                      axis=1)


@exports(RecurrentSum, RecurrentMean)
def export_recurrent_sum(builder, layer, value):
    """y = the sum (ReduceSum) or mean (ReduceMean) over the time axis; with the padding mask
    of an Embedding with a pad_id, over the real tokens (weights m, or m / max(sum m, 1))."""
    if layer.key_mask is None:
        return builder.reduce(value, "ReduceMean" if layer.mean else "ReduceSum", layer.name,
                              [1], 0, shape=layer.out_shape, steps=False)
    mask = padding_mask(builder, layer)
    weights = mean_weights(builder, layer, mask) if layer.mean else mask
    return weighted_sum_over_time(builder, layer, value, weights)


@exports(MeanPool)
def export_mean_pool(builder, layer, value):
    """y[n] = sum_t w[n, t] x[n, t] with w = m / max(sum_t m, 1), m the padding mask of the
    Embedding with a pad_id (a MatMul (N, 1, T) @ (N, T, d), as neonlite's batched dot), or
    the plain mean over the time axis when there is no mask."""
    if layer.key_mask is None:
        return builder.reduce(value, "ReduceMean", layer.name, [1], 0, shape=layer.out_shape,
                              steps=False)
    mask = padding_mask(builder, layer)
    return weighted_sum_over_time(builder, layer, value, mean_weights(builder, layer, mask))


def padding_mask(builder, layer):
    """The (N, T) float padding mask (1 at real tokens) of the Embedding with a pad_id."""
    if builder.key_mask is None:
        raise OnnxExportError(f"layer '{layer.name}' ({type(layer).__name__}): its padding "
                              f"mask comes from no exported Embedding before it")
    return builder.key_mask


def mean_weights(builder, layer, mask):
    """m / max(sum_t m, 1): the weights of a mean over the real tokens, (N, T)."""
    count = builder.reduce(mask, "ReduceSum", f"{layer.name}.count", [1], 1)
    count = builder.op(count, "Max", f"{layer.name}.count_at_least_1",
                       [builder.scalar(f"{layer.name}.one", 1.0)])
    return builder.op(mask, "Div", f"{layer.name}.weights", [count.name])


def weighted_sum_over_time(builder, layer, value, weights):
    """y[n] = sum_t w[n, t] x[n, t] for x (N, T, d) and weights w (N, T): a MatMul
    (N, 1, T) @ (N, T, d), as neonlite's batched dot."""
    axes = builder.int64(f"{layer.name}.time_axis", [1])
    rows = builder.op(weights, "Unsqueeze", f"{layer.name}.weight_rows", [axes])
    pooled = builder.node("MatMul", [rows.name, value.name], f"{layer.name}.pooled")
    return value.like(builder.node("Squeeze", [pooled, axes], layer.name),
                      shape=layer.out_shape, steps=False)


@exports(L2Normalize)
def export_l2_normalize(builder, layer, value):
    """y = x / max(sqrt(sum of x^2 over the last axis), eps)."""
    x = builder.to_layout(value, NHWC)
    squares = builder.op(x, "Mul", f"{layer.name}.squares", [x.name])
    total = builder.reduce(squares, "ReduceSum", f"{layer.name}.sum", [-1], 1)
    norm = builder.op(builder.op(total, "Sqrt", f"{layer.name}.sqrt"), "Max",
                      f"{layer.name}.norm", [builder.scalar(f"{layer.name}.eps", layer.eps)])
    return builder.op(x, "Div", layer.name, [norm.name])
