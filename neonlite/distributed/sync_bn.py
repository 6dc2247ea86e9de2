"""The hook synchronised batch norm uses: a sum over every rank.

:class:`~neonlite.layers.norm.BatchNorm` has a ``stat_sync`` attribute (None: statistics of
this rank's examples only, the default).  Set to a :class:`StatisticsSync`, its training
fprop sums the per-channel count, sum and sum of squared deviations over the ranks, and its
bprop sums the per-channel ``sum(dy)`` and ``sum(dy * xhat)``, so every rank normalizes with
the statistics of the global batch, as one process with the whole batch would.
"""
import numpy as np


class StatisticsSync:
    """``allreduce_sum(values)``: the element-wise sum of a small host array over the ranks
    (summed in float64; returns a new array)."""

    def __init__(self, collectives):
        self.collectives = collectives

    def allreduce_sum(self, values):
        buf = np.ascontiguousarray(values, dtype=np.float64).copy()
        return self.collectives.allreduce(buf, "batch norm statistics allreduce")
