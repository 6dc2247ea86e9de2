"""Floating-point operations and bytes moved by each backend op, from its arguments' shapes:
the costs of the op table (``backends/ops/``; the counting conventions are in
``backends/ops/costs.py``), so every op of the table is timed and counted by the profiler.

``OP_COSTS[name](*args, **kwargs) -> (flops, bytes)`` takes exactly the arguments of the
backend method ``name``; ``evaluate_into``, the CPU backend's entry point for ``tensor[:] =
tree``, counts as an op-tree.
"""
from ..backends.ops import OPS
from ..backends.ops.costs import conv_flops, gemm_flops, optree_cost, visible_pairs

OP_COSTS = {name: op.cost for name, op in OPS.items()}
OP_COSTS["evaluate_into"] = optree_cost


def op_cost(name, args, kwargs):
    """(FLOPs, bytes) of backend op ``name`` called with ``args``/``kwargs``; (0, 0) for an
    op without an entry."""
    cost = OP_COSTS.get(name)
    return cost(*args, **kwargs) if cost is not None else (0.0, 0.0)


__all__ = ["OP_COSTS", "op_cost", "conv_flops", "gemm_flops", "optree_cost", "visible_pairs"]
