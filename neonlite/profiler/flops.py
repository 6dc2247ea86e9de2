"""Floating-point operations and bytes moved by each backend op, from its arguments' shapes.

``OP_COSTS[name](*args, **kwargs) -> (flops, bytes)`` takes exactly the arguments of the
backend method ``name``.  Conventions (one multiply-add is 2 FLOPs):

- GEMM ``C (M, N) = A (M, K) @ B (K, N)``: 2*M*N*K per matrix (times the batch for
  ``batched_dot``); bytes read A, B (and C when ``beta`` != 0), write C.
- Convolution (fprop, data gradient and filter gradient alike): 2*N*P*Q*K*R*S*C; every
  algorithm (direct, tiled, im2col, 1x1 GEMM) does the same arithmetic, so the algorithm goes
  in the op's variant name, not its count.  Bytes: input, filters and output once each.
- Fused attention (``attention``/``attention_bprop``): per visible (query, key) pair,
  ``2*dk + 2*dv`` forward (scores, then probabilities times values) and ``6*dk + 4*dv``
  backward (scores recomputed, dV, dP, dQ, dK); the softmax's elementwise work is not
  counted.  Visible pairs are exact: a causal call counts only keys at or before each query
  (offset for decoding), a block layout only the key blocks each query block visits; key
  padding is not subtracted.  Block-sparse linear products count only stored blocks:
  ``2 * M * nnz * bs * bs`` per pass.
- Softmax: 5 per element (max, subtract, exp, sum, divide); its gradient 4; softmax with
  cross-entropy 7.  Norms: 8 per element forward (mean, variance, normalize, scale and
  shift), 12 backward.  GELU: 10 per element forward, 14 backward.  Pooling: R*S per output.
- An elementwise op-tree (``out[:] = tree``): one FLOP per operator node per output element
  (a reduction: per input element); bytes: each distinct tensor leaf read once, ``out``
  written once.
- Gathers, scatters, permutes and random draws: no FLOPs (scatter-add: one per element).
"""
import math

import numpy as np

from ..backends.optree import OpNode, is_scalar


def _size(t):
    return int(math.prod(t.shape))


def _bytes(*tensors):
    return float(sum(_size(t) * t.dtype.itemsize for t in tensors if t is not None
                     and hasattr(t, "shape")))


def gemm_flops(M, N, K, batch=1):
    """2 * M * N * K per product, times ``batch``."""
    return 2.0 * M * N * K * batch


def compound_dot(A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
    K = A.shape[0] if transA else A.shape[-1]
    M, N = C.shape[-2], C.shape[-1]
    return gemm_flops(M, N, K), _bytes(A, B, C) + (_bytes(C) if beta else 0.0)


def batched_dot(A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
    K = A.shape[-2] if transA else A.shape[-1]
    batch = math.prod(C.shape[:-2])
    return (gemm_flops(C.shape[-2], C.shape[-1], K, batch),
            _bytes(A, B, C) + (_bytes(C) if beta else 0.0))


def conv_flops(plan, n=None):
    """2 * N * P * Q * K * R * S * C for ``n`` images (default: the plan's batch)."""
    n = plan.N if n is None else n
    return 2.0 * n * plan.P * plan.Q * plan.K * plan.R * plan.S * plan.C


def fprop_conv(plan, I, F, O, bias=None, relu=False):
    return conv_flops(plan, I.shape[0]), _bytes(I, F, O, bias)


def bprop_conv(plan, F, E, grad_I, beta=0.0):
    return conv_flops(plan, E.shape[0]), _bytes(F, E, grad_I) + (_bytes(grad_I) if beta else 0)


def update_conv(plan, I, E, grad_F, beta=0.0):
    return conv_flops(plan, I.shape[0]), _bytes(I, E, grad_F) + (_bytes(grad_F) if beta else 0)


def fprop_pool(plan, I, O):
    return float(_size(O) * plan.R * plan.S), _bytes(I, O)


def bprop_pool(plan, E, grad_I, beta=0.0):
    return float(_size(E) * plan.R * plan.S), _bytes(E, grad_I)


def _per_element(count, first, *others):
    def cost(*args, **kwargs):
        return float(count * _size(args[0])), _bytes(*(args[i] for i in (first, *others)
                                                       if i < len(args)))
    return cost


def masked_softmax(x, out, scale=1.0, causal=False, key_mask=None):
    return 5.0 * _size(x), _bytes(x, out)


def visible_pairs(Tq, Tk, causal=False, blocks=None, heads=1):
    """The (query, key) pairs attention computes for one example's ``heads`` slices: keys
    before ``i + Tk - Tq + 1`` for query i when ``causal``, and only the key blocks a query
    block visits under ``blocks`` (an ``AttentionBlocks`` layout, shared or one per head)."""
    rows = np.arange(Tq)
    limit = np.clip(rows + (Tk - Tq) + 1, 0, Tk) if causal else np.full(Tq, Tk)
    if blocks is None:
        return heads * int(limit.sum())
    layout = blocks.layout
    starts = np.arange(layout.shape[2]) * blocks.bk
    widths = np.clip(np.minimum(starts + blocks.bk, Tk) - starts, 0, None)
    per_block = np.minimum(np.clip(limit[:, None] - starts[None, :], 0, None), widths[None, :])
    row_blocks = rows // blocks.bq
    total = sum(int((per_block * layout[h][row_blocks]).sum()) for h in range(layout.shape[0]))
    return total * heads if layout.shape[0] == 1 else total


def _attention_pairs(lse, k, causal, blocks, heads):
    """Pairs of every example: lse is (N*heads, Tq) whether q is head-major (N*heads, Tq, dk)
    or token-major (N, Tq, heads, dk)."""
    return (lse.shape[0] // heads) * visible_pairs(lse.shape[1], k.shape[1], causal, blocks,
                                                   heads)


def attention(q, k, v, out, lse, scale, causal=False, key_mask=None, dropout=None, blocks=None,
              heads=1):
    pairs = _attention_pairs(lse, k, causal, blocks, heads)
    return float(pairs * (2 * q.shape[-1] + 2 * v.shape[-1])), _bytes(q, k, v, out, lse)


def attention_bprop(q, k, v, out, lse, dout, dq, dk, dv, scale, causal=False, key_mask=None,
                    dropout=None, blocks=None, heads=1):
    pairs = _attention_pairs(lse, k, causal, blocks, heads)
    return (float(pairs * (6 * q.shape[-1] + 4 * v.shape[-1])),
            _bytes(q, k, v, out, lse, dout, dq, dk, dv))


def softmax_cross_entropy(logits, targets, probs, grad, scale=1.0):
    return 7.0 * _size(logits), _bytes(logits, targets, probs, grad)


def gelu(x, out, bias=None, pre=None, approximate="none"):
    return 10.0 * _size(x), _bytes(x, out, bias) + (_bytes(pre) if pre is not None else 0.0)


def gelu_bprop(x, dy, dx, dbias=None, approximate="none", y=None):
    return 14.0 * _size(x), _bytes(x, dy, dx, dbias, y)


def scatter_add_rows(grad_table, ids, rows):
    return float(_size(rows)), _bytes(ids, rows) + 2.0 * _bytes(rows)


def blocksparse_fprop(plan, x, w, y):
    M = _size(x) // x.shape[-1]
    return 2.0 * M * plan.nnz * plan.bs * plan.bs, _bytes(x, w, y)


def blocksparse_bprop(plan, e, w, dx, beta=0.0):
    M = _size(e) // e.shape[-1]
    return 2.0 * M * plan.nnz * plan.bs * plan.bs, _bytes(e, w, dx)


def blocksparse_update(plan, x, e, dw, beta=0.0):
    M = _size(x) // x.shape[-1]
    return 2.0 * M * plan.nnz * plan.bs * plan.bs, _bytes(x, e, dw)


def blocksparse_sdd(plan, a, b, s, alpha=1.0):
    return 2.0 * a.shape[0] * plan.nnz * plan.bs * plan.bs * a.shape[-1], _bytes(a, b, s)


def blocksparse_dsd(plan, p, b, o, transposed=False, beta=0.0):
    return 2.0 * p.shape[0] * plan.nnz * plan.bs * plan.bs * b.shape[-1], _bytes(p, b, o)


def blocksparse_softmax(plan, s, p, scale=1.0, causal=False):
    return 5.0 * _size(s), _bytes(s, p)


def blocksparse_softmax_bprop(plan, p, dp, ds, scale=1.0):
    return 4.0 * _size(p), _bytes(p, dp, ds)


def optree_cost(out, tree, keep=False):
    """(FLOPs, bytes) of evaluating ``tree`` into ``out`` (see the module docstring; ``keep``
    is the CPU backend's ``_evaluate`` flag, of no cost)."""
    if not isinstance(tree, OpNode):
        return 0.0, _bytes(out) + (0.0 if is_scalar(tree) else _bytes(tree))
    flops = _node_flops(tree, _size(out))
    leaves = [leaf for leaf in tree.leaves() if hasattr(leaf, "shape")]
    return flops, _bytes(out, *leaves)


def _node_flops(node, out_size):
    from ..backends.optree import REDUCTION_OPS
    inner = [a for a in node.args if isinstance(a, OpNode)]
    if node.op in REDUCTION_OPS:
        arg = node.args[0]
        size = _size(arg) if hasattr(arg, "shape") else _tree_size(arg, out_size)
        return float(size) + sum(_node_flops(a, size) for a in inner)
    return float(out_size) + sum(_node_flops(a, out_size) for a in inner)


def _tree_size(node, default):
    shapes = [a.shape for a in node.leaves() if hasattr(a, "shape")]
    return max((math.prod(s) for s in shapes), default=default)


def execute(out, optree):
    return optree_cost(out, optree)


def execute_multi(assignments):
    costs = [optree_cost(out, tree) for out, tree in assignments]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


def _no_flops(*tensor_positions):
    def cost(*args, **kwargs):
        return 0.0, _bytes(*(args[i] for i in tensor_positions if i < len(args)))
    return cost


OP_COSTS = {
    "compound_dot": compound_dot, "batched_dot": batched_dot,
    "fprop_conv": fprop_conv, "bprop_conv": bprop_conv, "update_conv": update_conv,
    "fprop_pool": fprop_pool, "bprop_pool": bprop_pool,
    "batchnorm_fprop": _per_element(8, 0, 5), "batchnorm_apply": _per_element(4, 0, 3),
    "batchnorm_moments": _per_element(3, 0),
    "batchnorm_bprop": _per_element(12, 0, 1, 4), "layernorm_fprop": _per_element(8, 0, 3, 4),
    "layernorm_bprop": _per_element(12, 0, 1, 4),
    "softmax": _per_element(5, 0, 1), "softmax_cross_entropy": softmax_cross_entropy,
    "masked_softmax": masked_softmax, "masked_softmax_bprop": _per_element(4, 0, 1, 2),
    "attention": attention, "attention_bprop": attention_bprop,
    "gelu": gelu, "gelu_bprop": gelu_bprop,
    "take_rows": _no_flops(1, 2), "scatter_add_rows": scatter_add_rows,
    "permute_axes": _no_flops(0, 1), "uniform": _no_flops(0), "dropout_mask": _no_flops(0),
    "example_dropout_mask": _no_flops(0),
    "blocksparse_fprop": blocksparse_fprop, "blocksparse_bprop": blocksparse_bprop,
    "blocksparse_update": blocksparse_update, "blocksparse_sdd": blocksparse_sdd,
    "blocksparse_dsd": blocksparse_dsd, "blocksparse_softmax": blocksparse_softmax,
    "blocksparse_softmax_bprop": blocksparse_softmax_bprop,
    "execute": execute, "execute_multi": execute_multi, "_evaluate": optree_cost,
}


def op_cost(name, args, kwargs):
    """(FLOPs, bytes) of backend op ``name`` called with ``args``/``kwargs``; (0, 0) for an
    op without an entry."""
    cost = OP_COSTS.get(name)
    return cost(*args, **kwargs) if cost is not None else (0.0, 0.0)
