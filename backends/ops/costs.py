"""The cost helpers of the op table's rows: floating-point operations and bytes moved by a
call, from its arguments' shapes.  A row's ``cost(*args, **kwargs) -> (flops, bytes)`` takes
exactly the arguments of its backend method.  Conventions (one multiply-add is 2 FLOPs):

- GEMM ``C (M, N) = A (M, K) @ B (K, N)``: 2*M*N*K per matrix (times the batch for
  ``batched_dot``); bytes read A, B (and C when ``beta`` != 0), write C.
- Convolution (fprop, data gradient and filter gradient alike): 2*N*P*Q*K*R*S*C; every
  algorithm does the same arithmetic, so the algorithm goes in the op's variant name, not its
  count.  Bytes: input, filters and output once each.
- Fused attention: per visible (query, key) pair ``2*dk + 2*dv`` forward and ``6*dk + 4*dv``
  backward (:func:`visible_pairs` counts the pairs exactly: causal, block layouts).
  Block-sparse products count only stored blocks: ``2 * M * nnz * bs * bs`` per pass.
- Per-element ops (norms, softmax, GELU, LRN, recurrent gates): a fixed count per element of
  one operand, stated by each row.
- An elementwise op-tree (``out[:] = tree``): one FLOP per operator node per output element
  (a reduction: per input element); bytes: each distinct tensor leaf read once, ``out``
  written once.
- Gathers, scatters, permutes and random draws: no FLOPs (scatter-add: one per element).
"""
import math

import numpy as np

from ..optree import REDUCTION_OPS, OpNode, is_scalar


def size(t):
    """The element count of tensor ``t``."""
    return int(math.prod(t.shape))


def nbytes(*tensors):
    """Bytes of every tensor of ``tensors`` (None and scalars count nothing)."""
    return float(sum(size(t) * t.dtype.itemsize for t in tensors if t is not None
                     and hasattr(t, "shape")))


def gemm_flops(M, N, K, batch=1):
    """2 * M * N * K per product, times ``batch``."""
    return 2.0 * M * N * K * batch


def conv_flops(plan, n=None):
    """2 * N * P * Q * K * R * S * C for ``n`` images (default: the plan's batch)."""
    n = plan.N if n is None else n
    return 2.0 * n * plan.P * plan.Q * plan.K * plan.R * plan.S * plan.C


def per_element(count, first, *others):
    """A cost of ``count`` FLOPs per element of argument ``first``; bytes of the arguments at
    positions ``first`` and ``others`` (those given)."""
    def cost(*args, **kwargs):
        return float(count * size(args[0 if first is None else first])), \
            nbytes(*(args[i] for i in (first, *others) if i < len(args)))
    return cost


def all_tensors(*args, **kwargs):
    """Bytes of every tensor argument, positional or named."""
    return nbytes(*args, *kwargs.values())


def no_flops(*tensor_positions):
    """A cost of no FLOPs; bytes of the arguments at ``tensor_positions``."""
    def cost(*args, **kwargs):
        return 0.0, nbytes(*(args[i] for i in tensor_positions if i < len(args)))
    return cost


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


def optree_cost(out, tree, keep=False):
    """(FLOPs, bytes) of evaluating ``tree`` into ``out`` (see the module docstring; ``keep``
    is the CPU backend's ``evaluate_into`` flag, of no cost)."""
    if not isinstance(tree, OpNode):
        return 0.0, nbytes(out) + (0.0 if is_scalar(tree) else nbytes(tree))
    flops = _node_flops(tree, size(out))
    leaves = [leaf for leaf in tree.leaves() if hasattr(leaf, "shape")]
    return flops, nbytes(out, *leaves)


def _node_flops(node, out_size):
    inner = [a for a in node.args if isinstance(a, OpNode)]
    if node.op in REDUCTION_OPS:
        arg = node.args[0]
        n = size(arg) if hasattr(arg, "shape") else _tree_size(arg, out_size)
        return float(n) + sum(_node_flops(a, n) for a in inner)
    return float(out_size) + sum(_node_flops(a, out_size) for a in inner)


def _tree_size(node, default):
    shapes = [a.shape for a in node.leaves() if hasattr(a, "shape")]
    return max((math.prod(s) for s in shapes), default=default)
