"""MultiHeadAttention (self-attention) and TransformerBlock as MatMul / Softmax graphs.

Per head h, as ``layers/attention.py`` and the reference ``backends/reference/attention.py``:
O_h = softmax(scale Q_h K_h^T, hidden keys excluded) V_h, y = concat_h(O_h) Wo + bo, with
Q = x Wq + bq etc.  Keys are hidden by the causal mask (key j > query i) and by the padding
mask of the Embedding with a ``pad_id`` (key j a pad).  A query whose every key is hidden gets
zeros, as neonlite's (the probabilities are multiplied by the visible-key mask after the
Softmax).  Heads are split with Reshape (0, 0, H, dh) (batch and time copied from the input),
so both stay dynamic.  BlockSparseAttention is the same graph with the keys outside its
layout's blocks hidden as well (a dense mask: ONNX has no block-sparse attention).
"""
import numpy as np

from ...layers import BlockSparseAttention, MultiHeadAttention, TransformerBlock
from .errors import OnnxExportError
from .graph import NHWC
from .registry import export_layer, exports
from .sequence import steps_of

BOOL = 9  # onnx.TensorProto.BOOL
LOWEST = float(np.finfo(np.float32).min)


def _projection(builder, layer, x, which):
    """x W + b for ``which`` in "qkvo" (a bias of zeros when the layer has none)."""
    w = builder.parameter(getattr(layer, f"W{which}"))
    out = builder.op(x, "MatMul", f"{layer.name}.{which}", [w])
    b = builder.constant(f"{layer.name}.b{which}", getattr(layer, f"b{which}").value.get()) \
        if not layer.bias else builder.parameter(getattr(layer, f"b{which}"))
    return builder.op(out, "Add", f"{layer.name}.{which}_biased", [b])


def _heads(builder, layer, value, width, name, perm):
    """(N, T, H*dh) -> (N, T, H, dh) -> transposed by ``perm``."""
    shape = builder.int64(f"{name}.heads_shape", [0, 0, layer.heads, width])
    split = builder.op(value, "Reshape", f"{name}.heads", [shape])
    return builder.op(split, "Transpose", f"{name}.by_head", perm=list(perm))


def hidden_keys(builder, layer, x):
    """A bool tensor broadcasting to (N, H, T, T), true where a key is hidden, or None."""
    hidden = None
    if layer.causal:
        steps = builder.node("Squeeze", [steps_of(builder, x, layer.name),
                                         builder.int64(f"{layer.name}.axis0", [0])],
                             f"{layer.name}.T")
        zero, one = builder.int64(f"{layer.name}.zero", 0), builder.int64(f"{layer.name}.one", 1)
        positions = builder.node("Range", [zero, steps, one], f"{layer.name}.positions")
        queries = builder.node("Unsqueeze", [positions, builder.int64(f"{layer.name}.col", [1])],
                               f"{layer.name}.query_positions")
        hidden = builder.node("Greater", [positions, queries], f"{layer.name}.causal_hidden")
    if layer.key_mask is not None:
        if builder.key_mask is None:
            raise OnnxExportError(f"layer '{layer.name}' (MultiHeadAttention): its padding mask "
                                  f"comes from no exported Embedding before it")
        pads = builder.node("Equal", [builder.key_mask.name,
                                      builder.scalar(f"{layer.name}.pad", 0.0)],
                            f"{layer.name}.key_is_pad")
        pads = builder.node("Unsqueeze", [pads, builder.int64(f"{layer.name}.head_axes", [1, 2])],
                            f"{layer.name}.pad_hidden")
        hidden = pads if hidden is None else builder.node("Or", [hidden, pads],
                                                          f"{layer.name}.hidden")
    return hidden


@exports(MultiHeadAttention)
def export_attention(builder, layer, value, blocks_hidden=None):
    """Self-attention (a cross-attention layer takes a second input: refused).
    ``blocks_hidden``: a further bool initializer of hidden keys (a block-sparse layout)."""
    if layer.cross:
        raise OnnxExportError(f"layer '{layer.name}' (MultiHeadAttention): cross-attention takes "
                              f"a second input (the context) and does not export to ONNX yet")
    x = builder.to_layout(value, NHWC)
    q = _heads(builder, layer, _projection(builder, layer, x, "q"), layer.dhk,
               f"{layer.name}.q", (0, 2, 1, 3))
    k = _heads(builder, layer, _projection(builder, layer, x, "k"), layer.dhk,
               f"{layer.name}.k", (0, 2, 3, 1))
    v = _heads(builder, layer, _projection(builder, layer, x, "v"), layer.dhv,
               f"{layer.name}.v", (0, 2, 1, 3))
    scores = builder.op(builder.op(q, "MatMul", f"{layer.name}.qk", [k.name]), "Mul",
                        f"{layer.name}.scores", [builder.scalar(f"{layer.name}.scale",
                                                                layer.scale)])
    hidden = hidden_keys(builder, layer, x)
    if blocks_hidden is not None:
        hidden = blocks_hidden if hidden is None else builder.node(
            "Or", [hidden, blocks_hidden], f"{layer.name}.hidden_outside_blocks")
    if hidden is not None:
        lowest = builder.scalar(f"{layer.name}.lowest", LOWEST)
        scores = scores.like(builder.node("Where", [hidden, lowest, scores.name],
                                          f"{layer.name}.masked"))
    probs = builder.op(scores, "Softmax", f"{layer.name}.probs", axis=-1)
    if hidden is not None:
        visible = builder.node("Cast", [builder.node("Not", [hidden], f"{layer.name}.visible")],
                               f"{layer.name}.visible_f", to=1)
        probs = builder.op(probs, "Mul", f"{layer.name}.probs_visible", [visible])
    heads = builder.op(probs, "MatMul", f"{layer.name}.per_head", [v.name])
    merged = builder.op(heads, "Transpose", f"{layer.name}.by_token", perm=[0, 2, 1, 3])
    merged = builder.op(merged, "Reshape", f"{layer.name}.merged",
                        [builder.int64(f"{layer.name}.merged_shape", [0, 0, layer.dv])])
    out = _projection(builder, layer, merged, "o")
    return out.like(out.name, shape=layer.out_shape)


@exports(BlockSparseAttention)
def export_blocksparse_attention(builder, layer, value):
    """The attention graph with the keys outside the layout's blocks hidden too: a bool
    initializer (1, H, T, T) from the layout (H, T/bs, T/bs); a query row without blocks
    gets zeros.  The layout is made for the configured T, so the time axis is fixed."""
    builder.fix_steps(value)
    outside = np.kron(layer.plan.layout, np.ones((layer.bs, layer.bs))) == 0
    hidden = builder.constant(f"{layer.name}.outside_blocks", outside[None], np.bool_)
    return export_attention(builder, layer, value, blocks_hidden=hidden)


@exports(TransformerBlock)
def export_transformer_block(builder, layer, value):
    """pre-norm: r = x + attn(ln1(x)), y = r + fc2(gelu(fc1(ln2(r))));
    post-norm: r = ln1(x + attn(x)), y = ln2(r + fc2(gelu(fc1(r)))) (dropout: none)."""
    x = builder.to_layout(value, NHWC)

    def mlp(v):
        for sub in (layer.fc1, layer.gelu, layer.fc2):
            v = export_layer(builder, sub, v)
        return v

    if layer.norm == "pre":
        attended = export_layer(builder, layer.attn, export_layer(builder, layer.ln1, x))
        r = builder.op(x, "Add", f"{layer.name}.residual1", [attended.name])
        return builder.op(r, "Add", layer.name, [mlp(export_layer(builder, layer.ln2, r)).name])
    attended = export_layer(builder, layer.attn, x)
    r = export_layer(builder, layer.ln1, builder.op(x, "Add", f"{layer.name}.residual1",
                                                    [attended.name]))
    return export_layer(builder, layer.ln2, builder.op(r, "Add", f"{layer.name}.residual2",
                                                       [mlp(r).name]))
