"""Recurrent, LSTM and GRU as ONNX's RNN, LSTM and GRU ops, gate order converted.

neonlite keeps W (D, G*H), U (H, G*H), b (G*H,) with gate blocks (i, f, g, o) for the LSTM and
(r, z, n) for the GRU (PyTorch's orders); ONNX wants W (1, G*H, D), R (1, G*H, H) and
B (1, 2*G*H) (input then recurrent biases) with gate blocks (i, o, f, c) and (z, r, h).  The
GRU is PyTorch's (``linear_before_reset=1``: r multiplies h U_n + b_hn).  The sequence is
transposed to ONNX's time-major (T, N, D) and back; T stays dynamic.  ``reverse=True`` is
ONNX's ``direction="reverse"`` (outputs in time order, the final state that of step 0).
BiRNN / BiLSTM / BiGRU are their two cells, each one op, concatenated or summed.

Each export runs from the layer's initial state of zeros: a ``stateful`` layer's carried
state belongs to the run that trained it (each ONNX run is a fresh sequence); a layer given
another initial state (``set_initial_state``) is refused.

The padding mask of an Embedding with a ``pad_id`` becomes the op's ``sequence_lens`` (the
count of real tokens of each sequence), which is neonlite's masked recurrence for batches
padded at the end (as ``Tokenizer.encode_batch`` and the sequence iterators pad them): the
state stops at each sequence's last real token, the reverse direction starts there, and the
outputs at the pad steps are zeros, in both.  Pads before a real token are not expressed: ONNX
has no per-step mask.
A mask given by hand (``layer.mask`` set by the user) is refused.
"""
import numpy as np

from ...layers import GRU, LSTM, BiGRU, BiLSTM, BiRNN, Recurrent
from ...transforms.activation import Identity, Logistic, Rectlin, Tanh
from .dense import weights
from .errors import OnnxExportError
from .graph import NHWC
from .registry import export_layer, exports

#: neonlite's gate blocks in ONNX's order
LSTM_ORDER = (0, 3, 1, 2)  # (i, f, g, o) -> (i, o, f, c)
GRU_ORDER = (1, 0, 2)  # (r, z, n) -> (z, r, h)
RNN_ORDER = (0,)


def _onnx_activation(layer, transform):
    if isinstance(transform, Tanh):
        return "Tanh"
    if isinstance(transform, Logistic):
        return "Sigmoid"
    if isinstance(transform, Rectlin) and not transform.slope:
        return "Relu"
    if isinstance(transform, Identity):
        raise OnnxExportError(f"layer '{layer.name}' ({type(layer).__name__}): an Identity "
                              f"activation has no ONNX recurrent-op name; not exported yet")
    raise OnnxExportError(f"layer '{layer.name}': activation {transform!r} does not export")


def _gates(array, order, H):
    """The gate blocks of ``array`` (..., G*H) in ``order`` along the last axis."""
    return np.concatenate([array[..., k * H:(k + 1) * H] for k in order], axis=-1)


INT32 = 6  # onnx.TensorProto.INT32


def sequence_lengths(builder, layer):
    """None for a layer without a padding mask, else the (N,) int32 count of real tokens of
    each sequence, from the padding mask of the Embedding with a ``pad_id`` (made once per
    graph)."""
    if layer.mask is None:
        return None
    if getattr(layer, "shared_mask", None) is None or builder.key_mask is None:
        raise OnnxExportError(f"layer '{layer.name}' ({type(layer).__name__}): a mask set by "
                              f"hand does not export to ONNX; a padding mask from an "
                              f"Embedding with a pad_id does")
    if builder.sequence_lens is None:
        total = builder.reduce(builder.key_mask, "ReduceSum", "sequence_lens.float", [1], 0)
        builder.sequence_lens = builder.op(total, "Cast", "sequence_lens", to=INT32)
    return builder.sequence_lens


def _export_cell(builder, layer, value, op, order, activations, recurrent_bias, lengths,
                 **attributes):
    lengths = lengths if lengths is not None else sequence_lengths(builder, layer)
    if layer._initial:
        raise OnnxExportError(f"layer '{layer.name}' ({type(layer).__name__}): a set initial "
                              f"state does not export to ONNX")
    H = layer.nout
    x = builder.to_layout(value, NHWC)
    w = _gates(weights(layer, "W"), order, H).T[None]
    r = _gates(weights(layer, "U"), order, H).T[None]
    b = np.concatenate([_gates(weights(layer, "b"), order, H),
                        _gates(recurrent_bias, order, H)])[None]
    inputs = [builder.constant(f"{layer.name}.W_onnx", w),
              builder.constant(f"{layer.name}.R_onnx", r),
              builder.constant(f"{layer.name}.B_onnx", b)]
    steps_first = builder.op(x, "Transpose", f"{layer.name}.time_major", perm=[1, 0, 2])
    out = builder.unique(f"{layer.name}.Y")
    final = builder.unique(f"{layer.name}.Y_h")
    outputs = [out, final] + ([builder.unique(f"{layer.name}.Y_c")] if op == "LSTM" else [])
    if lengths is not None:
        inputs.append(lengths.name)
    builder.nodes.append(builder.onnx.helper.make_node(
        op, [steps_first.name, *inputs], outputs, name=builder.unique(f"{layer.name}/{op}"),
        hidden_size=H, activations=activations,
        direction="reverse" if layer.reverse else "forward", **attributes))
    if not layer.return_sequences:
        axis = builder.int64(f"{layer.name}.direction_axis", [0])
        return x.like(builder.node("Squeeze", [final, axis], layer.name),
                      shape=layer.out_shape, steps=False)
    axis = builder.int64(f"{layer.name}.direction_axis", [1])
    squeezed = builder.node("Squeeze", [out, axis], f"{layer.name}.Y_time_major")
    return x.like(builder.node("Transpose", [squeezed], layer.name, perm=[1, 0, 2]),
                  shape=layer.out_shape)



@exports(Recurrent)
def export_recurrent(builder, layer, value, lengths=None):
    """h_t = act(x_t W + h_{t-1} U + b): ONNX RNN."""
    return _export_cell(builder, layer, value, "RNN", RNN_ORDER,
                        [_onnx_activation(layer, layer.activation)],
                        np.zeros(layer.nout, np.float32), lengths)


@exports(LSTM)
def export_lstm(builder, layer, value, lengths=None):
    """ONNX LSTM, activations (gate, cell input, cell output) = (gate_activation, activation,
    activation)."""
    gate, act = (_onnx_activation(layer, layer.gate_activation),
                 _onnx_activation(layer, layer.activation))
    return _export_cell(builder, layer, value, "LSTM", LSTM_ORDER, [gate, act, act],
                        np.zeros(4 * layer.nout, np.float32), lengths)


@exports(GRU)
def export_gru(builder, layer, value, lengths=None):
    """ONNX GRU with ``linear_before_reset=1`` (PyTorch's GRU, as neonlite's)."""
    return _export_cell(builder, layer, value, "GRU", GRU_ORDER, ["Sigmoid", "Tanh"],
                        weights(layer, "b_h"), lengths, linear_before_reset=1)


@exports(BiRNN, BiLSTM, BiGRU)
def export_bidirectional(builder, layer, value):
    """The forward and the reversed cell, each its own ONNX op, then Concat along the last axis
    (forward first) or Sum, as the layer merges them."""
    lengths = sequence_lengths(builder, layer)
    forward = export_layer(builder, layer.fwd, value, lengths)
    backward = export_layer(builder, layer.bwd, value, lengths)
    if layer.merge == "sum":
        return builder.op(forward, "Add", layer.name, [backward.name], shape=layer.out_shape)
    return builder.op(forward, "Concat", layer.name, [backward.name], shape=layer.out_shape,
                      axis=-1)
