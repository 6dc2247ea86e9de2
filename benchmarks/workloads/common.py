"""Shared pieces of the workloads."""
import numpy as np


class FixedBatch:
    """A data set of exactly one batch (``shape``/``target_shape`` like an iterator) so a model
    can be initialized without real data."""

    def __init__(self, x_shape, target_shape, name="bench"):
        self.shape, self.target_shape, self.name = tuple(x_shape), tuple(target_shape), name


def class_targets(be, ids, nclass):
    """Device targets for integer class ids (any shape): int32 indices, as the iterators yield
    them, or one-hot rows (ids.shape + (nclass,)) on a backend (or an older neonlite, for
    before/after timings) whose softmax-cross-entropy takes no indices."""
    ids = np.asarray(ids)
    if getattr(be, "index_targets", False):
        return be.array(ids, dtype=np.int32)
    onehot = np.zeros(ids.shape + (nclass,))
    np.put_along_axis(onehot, ids[..., None], 1.0, axis=-1)
    return be.array(onehot)


def random_batch(be, x_shape, nclass, seed=0):
    """Device tensors x (N,)+x_shape ~ U(0,1) and targets of N random classes < nclass
    (:func:`class_targets`)."""
    rng = np.random.default_rng(seed)
    x = be.array(rng.random((be.bsz,) + tuple(x_shape)))
    return x, class_targets(be, rng.integers(0, nclass, be.bsz), nclass)


def torch_threads():
    import os
    import torch
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    return torch
