"""The hook synchronised batch norm uses: statistics over every rank.

:class:`~neonlite.layers.batchnorm.BatchNorm` has a ``stat_sync`` attribute (None: statistics of
this rank's examples only, the default).  Set to a :class:`StatisticsSync`, its training
fprop combines the per-channel (count, mean, sum of squared deviations) of every rank, and its
bprop sums the per-channel ``sum(dy)`` and ``sum(dy * xhat)``, so every rank normalizes with
the statistics of the global batch, as one process with the whole batch would.

The moments are gathered (not summed) and combined in rank order by the pairwise update of
Chan, Golub and LeVeque (1979), in float64: no cancellation between sums of squares, and the
same bits on every rank.  The result differs from one process's single pass over the whole
batch by float64 rounding only, so after rounding to float32 both normalize with the same
mean and invstd.
"""
import numpy as np


def combine_moments(rows):
    """(count, mean (C,), m2 (C,)) of the union of row groups, from ``rows`` (R, 1 + 2C): each
    group's count, mean and sum of squared deviations, combined in order."""
    rows = np.asarray(rows, dtype=np.float64)
    C = (rows.shape[1] - 1) // 2
    count, mean, m2 = rows[0, 0], rows[0, 1:C + 1].copy(), rows[0, C + 1:].copy()
    for row in rows[1:]:
        n, mu, sq = row[0], row[1:C + 1], row[C + 1:]
        total = count + n
        delta = mu - mean
        mean += delta * (n / total)
        m2 += sq + delta * delta * (count * n / total)
        count = total
    return count, mean, m2


class StatisticsSync:
    """Sums and moments of small host arrays over the ranks (float64)."""

    def __init__(self, collectives):
        self.collectives = collectives

    def allreduce_sum(self, values):
        """The element-wise sum of ``values`` over the ranks (a new array)."""
        buf = np.ascontiguousarray(values, dtype=np.float64).copy()
        return self.collectives.allreduce(buf, "batch norm statistics allreduce")

    def combine_moments(self, count, mean, m2):
        """(count, mean, m2) of every rank's rows together (see :func:`combine_moments`)."""
        mine = np.concatenate([[float(count)], mean, m2]).astype(np.float64)
        return combine_moments(self.collectives.allgather(mine, "batch norm moments allgather"))
