"""ArrayIterator: minibatches of in-memory arrays, batch-first, on the current backend."""
import numpy as np

from ..backends import get_backend
from ..host_memory import available_bytes, describe_bytes
from .augment.draws import epoch_key
from .augment.from_config import pipeline_from_config
from .augment.pipeline import FLOAT_OUTPUTS
from .errors import DataError
from .position import EpochBatches


def check_batch_fits(name, bsz, shapes, be):
    """DataError before allocating when the batch buffers of ``shapes`` (one example each,
    e.g. the input and the target) for a batch of ``bsz`` need more than the memory
    available (the backend's ``memory_bytes()`` where it has one, else this process's)."""
    itemsize = np.dtype(be.dtype).itemsize
    need = sum(float(bsz) * float(np.prod(shape, dtype=np.float64)) * itemsize
               for shape in shapes)
    limit = getattr(be, "memory_bytes", available_bytes)()
    if limit and need > limit:
        raise DataError(f"{name}: a batch of {bsz:,} examples of shape {tuple(shapes[0])} "
                        f"needs {describe_bytes(need)} for its input and target buffers, more "
                        f"than the {describe_bytes(limit)} of memory available (lower the "
                        f"batch size)")


class ArrayIterator(EpochBatches):
    """Iterate (x, t) minibatches of ``X`` (N, ...) and targets ``y``.

    Arguments:
        X: (N, ...) array, batch-first (images NHWC).  uint8 data stays uint8 on the host and is
            scaled by 1/255 on the way in.
        y: None (x is returned as the target, for autoencoders), (N,) class indices (with
            ``nclass``: yielded as int32 class indices (N,), checked to lie in [0, nclass),
            which the costs take for (N, nclass) outputs), or (N, ...) real-valued targets.
        nclass: number of classes for index targets.
        shuffle: shuffle the examples each epoch from the backend's seeded RNG.
        augment: None, or the augmentation of uint8 images X (N, H, W, C): a
            :class:`~neonlite.data.augment.Pipeline` or its YAML list (a list is a training
            pipeline; give ``Pipeline(ops, train=False)`` or ``pipeline.evaluation()`` for
            evaluation data).  Each batch is augmented on the host, as uint8, before the copy
            to the device; ``shape`` is the augmented one.  The epoch's augmentation key is
            drawn from the backend's host RNG after the shuffle order.

    The last batch of an epoch may be partial: it is filled up by wrapping around to the start
    of the data, and ``valid`` tells how many of its rows are real (after each step of the
    iteration).  Each batch reuses the same two device buffers.

    ``shard(rank, nranks)`` makes it one of ``nranks`` disjoint parts (data-parallel
    training): each global batch is ``nranks`` times the backend's batch, drawn from the
    epoch's order (the same on every process, from the seed), and this process takes rows
    ``rank * bsz .. (rank + 1) * bsz - 1`` of it.
    """

    def __init__(self, X, y=None, nclass=None, shuffle=True, name="data", augment=None):
        self.be = get_backend()
        X = np.asarray(X)
        self.name = name
        if X.ndim < 2:
            raise DataError(f"{name}: X must be batch-first with at least 2 axes (N, ...), got "
                            f"shape {X.shape}")
        if X.shape[0] == 0:
            raise DataError(f"{name}: the data set is empty (X has shape {X.shape})")
        if X.dtype.kind not in "uif":
            raise DataError(f"{name}: X must be numeric, got dtype {X.dtype}")
        if X.dtype.kind == "f":
            _check_finite(X, name, "X")
        self.X, self.ndata, self.shape = X, X.shape[0], tuple(X.shape[1:])
        self.augment = self._augmentation(augment)
        self.shuffle = shuffle
        self.nclass = nclass
        self.y = None if y is None else self._targets(np.asarray(y), nclass)
        self.target_shape = self.shape if y is None else (
            () if nclass is not None else tuple(self.y.shape[1:]))
        bsz = self.be.bsz
        self.nbatches = -(-self.ndata // bsz)
        check_batch_fits(name, bsz, [self.shape] + ([] if y is None else [self.target_shape]),
                         self.be)
        if self.augment is not None:
            dtype = np.uint8 if not self.augment.normalizes else (
                self.be.dtype if self.be.dtype in FLOAT_OUTPUTS else np.float32)
            self.x_host = np.empty((bsz,) + self.shape, dtype)
        self.x_buf = self.be.zeros((bsz,) + self.shape)
        self.t_buf = self.x_buf if y is None else self.be.zeros(
            (bsz,) + self.target_shape, dtype=np.int32 if nclass is not None else None)
        self.valid = bsz
        self.key = 0
        self.order = np.arange(self.ndata)
        self.rank, self.nranks = 0, 1

    def _augmentation(self, augment):
        """The pipeline of option ``augment`` (None: none), ``shape`` set to the augmented
        shape (the host buffer ``x_host`` it writes is made once the batch is known to fit)."""
        if augment is None or (isinstance(augment, list) and not augment):
            return None
        pipeline = pipeline_from_config(augment, f"{self.name}: augment")
        if self.X.dtype != np.uint8 or self.X.ndim != 4:
            raise DataError(f"{self.name}: augment needs uint8 images X (N, H, W, C), got "
                            f"shape {self.X.shape} dtype {self.X.dtype}")
        self.shape = pipeline.out_shape(self.shape)
        pipeline.check_batch(self.X.shape[1:], self.be.bsz)
        return pipeline

    def shard(self, rank, nranks):
        """Iterate only part ``rank`` of ``nranks`` of every global batch (see the class doc)."""
        self.rank, self.nranks = shard_check(self.name, rank, nranks)
        self.nbatches = -(-self.ndata // (self.be.bsz * nranks))
        return self

    def _targets(self, y, nclass):
        if y.shape[0] != self.ndata:
            raise DataError(f"{self.name}: X has {self.ndata} examples but y has {y.shape[0]}")
        if nclass is None:
            if y.dtype.kind == "f":
                _check_finite(y, self.name, "y")
            return y
        if not isinstance(nclass, (int, np.integer)) or nclass < 2:
            raise DataError(f"{self.name}: nclass must be an int >= 2, got {nclass!r}")
        labels = y.reshape(self.ndata, -1)
        if labels.shape[1] != 1 or y.dtype.kind not in "ui" and not np.all(np.mod(y, 1) == 0):
            raise DataError(f"{self.name}: with nclass, y must hold one integer class index per "
                            f"example, got shape {y.shape} dtype {y.dtype}")
        labels = labels[:, 0].astype(np.int64)
        bad = np.flatnonzero((labels < 0) | (labels >= nclass))
        if bad.size:
            raise DataError(f"{self.name}: label {labels[bad[0]]} at index {bad[0]} is out of "
                            f"range; expected 0 <= label < nclass={nclass}")
        return labels

    def batches(self, shuffle, skip=0):
        """Generator of (x, t) device buffers for one epoch, shuffled or in order, from batch
        ``skip`` on (the order is drawn for the whole epoch all the same)."""
        bsz = self.be.bsz
        if shuffle:
            self.order = self.be.rng.permutation(self.ndata)
        else:
            self.order = np.arange(self.ndata)
        if self.augment is not None and self.augment.is_random:
            self.key = epoch_key(self.be.rng)
        for b in range(skip, self.nbatches):
            start = (b * self.nranks + self.rank) * bsz
            idx = self.order[np.arange(start, start + bsz) % self.ndata]
            self.valid = max(0, min(bsz, self.ndata - start))
            self._fill(idx)
            yield self.x_buf, self.t_buf

    def _fill(self, idx):
        x = self.X[idx]
        if self.augment is not None:
            x = self.augment.apply(x, idx, self.key, self.x_host)
        set_batch(self.x_buf, self.t_buf, x, None if self.y is None else self.y[idx])


def set_batch(x_buf, t_buf, x, y):
    """Copy host batch ``x`` (bsz, ...) into device buffer ``x_buf``, uint8 scaled by 1/255 on
    the way, and targets ``y`` (class indices or values) into ``t_buf`` (cast to its dtype).
    ``y`` None: no targets (``t_buf`` is ``x_buf``)."""
    x_buf.set(x * (1.0 / 255.0) if x.dtype == np.uint8 else x)
    if y is not None:
        t_buf.set(y)


def shard_check(name, rank, nranks):
    """``(rank, nranks)`` checked: integers with 0 <= rank < nranks."""
    if not all(isinstance(v, (int, np.integer)) for v in (rank, nranks)) or \
            not 0 <= rank < nranks:
        raise DataError(f"{name}: shard needs integers 0 <= rank < nranks, got rank={rank!r}, "
                        f"nranks={nranks!r}")
    return int(rank), int(nranks)


def _check_finite(a, name, what):
    bad = ~np.isfinite(a)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{name}: {what} contains a non-finite value ({a[where]}) at index "
                        f"{where}")
