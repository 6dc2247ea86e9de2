"""Shared pieces of the workloads."""
import numpy as np


class FixedBatch:
    """A data set of exactly one batch (``shape``/``target_shape`` like an iterator) so a model
    can be initialized without real data."""

    def __init__(self, x_shape, target_shape, name="bench"):
        self.shape, self.target_shape, self.name = tuple(x_shape), tuple(target_shape), name


def random_batch(be, x_shape, nclass, seed=0):
    """Device tensors x (N,)+x_shape ~ U(0,1) and t (N,) int32 class indices < nclass (what
    the iterators yield)."""
    rng = np.random.default_rng(seed)
    x = be.array(rng.random((be.bsz,) + tuple(x_shape)))
    return x, be.array(rng.integers(0, nclass, be.bsz), dtype=np.int32)


def torch_threads():
    import os
    import torch
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    return torch
