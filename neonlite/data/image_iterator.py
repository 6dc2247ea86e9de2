"""ImageIterator: minibatches of image files, decoded and augmented in loader workers a few
batches ahead of training, on the current backend.

Determinism: the epoch's order and its augmentation key (:func:`~.augment.draws.epoch_key`)
are drawn from the backend's host RNG when the epoch starts, and sample ``i``'s augmentation
comes from Philox keyed on (key, ``i``), so a batch is the same bits whatever the number of
workers (0 included) and whichever worker made it; ``batches_from(skip)`` draws the same and
decodes nothing for the skipped batches (:mod:`neonlite.data.position`).
"""
import numpy as np

from ..backends import get_backend
from ..host_memory import available_bytes, describe_bytes
from .augment.draws import epoch_key
from .image_workers import LoaderPool
from .iterator import DataError, check_batch_fits, set_batch, shard_check
from .position import EpochBatches


class ImageIterator(EpochBatches):
    """Iterate (x, t) minibatches of the images ``maker.files`` lists, made by ``maker`` (a
    :class:`~.image_batch.BatchMaker`: decoder and augmentation pipeline).

    Same interface as :class:`~.iterator.ArrayIterator` (``shape``, ``target_shape``,
    ``ndata``, ``nbatches``, ``len()``, iteration, ``batches(shuffle)``,
    ``batches_from(skip)``, ``valid``, ``name``, ``shard(rank, nranks)``): x is (bsz, H, W, C)
    NHWC, ``shape`` the pipeline's output shape (the images' own without one), uint8 output
    scaled by 1/255 on the way in, a normalising pipeline's floats set as they are; t int32
    class indices (bsz,).  The last batch wraps around to the epoch's first examples;
    ``valid`` tells how many rows are real.  ``skipped``: the corrupt images replaced so far
    this epoch (``skip_corrupt``).

    ``num_workers`` 0 makes each batch in this process when it is asked for; more start that
    many worker processes (once, kept for later epochs, stopped by :meth:`close`, at exit, or
    when the iterator is collected) that make up to ``prefetch`` batches each ahead of
    training into shared memory (:class:`~.image_workers.LoaderPool`).  A worker that fails,
    dies or makes no progress for ``worker_timeout`` seconds ends the iteration with one
    :class:`DataError`.
    """

    def __init__(self, maker, shape, nclass, shuffle=True, num_workers=2, prefetch=2,
                 worker_timeout=120.0, name="images"):
        self.be = get_backend()
        self.maker, self.name, self.nclass = maker, name, nclass
        self.ndata, self.shape, self.target_shape = len(maker.files), tuple(shape), ()
        self.shuffle, self.num_workers = shuffle, int(num_workers)
        self.prefetch, self.worker_timeout = int(prefetch), float(worker_timeout)
        pipeline = maker.pipeline
        self.out_dtype = np.dtype(np.uint8) if pipeline is None or not pipeline.normalizes \
            else (np.dtype(self.be.dtype) if np.dtype(self.be.dtype) in pipeline.out_dtypes()
                  else np.dtype(np.float32))
        bsz = self.be.bsz
        self.nbatches = -(-self.ndata // bsz)
        check_batch_fits(name, bsz, [self.shape, ()], self.be)
        self._check_slots_fit(bsz)
        self.x_buf = self.be.zeros((bsz,) + self.shape)
        self.t_buf = self.be.zeros((bsz,), dtype=np.int32)
        self.valid, self.skipped = bsz, 0
        self.order = np.arange(self.ndata)
        self.rank, self.nranks = 0, 1
        self._pool, self._host = None, None

    def _check_slots_fit(self, bsz):
        slots = max(1, self.num_workers * self.prefetch)
        need = float(slots) * bsz * float(np.prod(self.shape)) * self.out_dtype.itemsize
        limit = available_bytes()
        if limit and need > limit / 2:
            raise DataError(f"{self.name}: {slots} loader slots (num_workers x prefetch) of "
                            f"{bsz} images {self.shape} need {describe_bytes(need)} of shared "
                            f"memory, more than half the {describe_bytes(limit)} available "
                            f"(lower prefetch, num_workers or the batch size)")

    def shard(self, rank, nranks):
        """Iterate only part ``rank`` of ``nranks`` of every global batch (as
        :meth:`ArrayIterator.shard`)."""
        self.rank, self.nranks = shard_check(self.name, rank, nranks)
        self.nbatches = -(-self.ndata // (self.be.bsz * nranks))
        return self

    def batches(self, shuffle, skip=0):
        """Generator of (x, t) device buffers for one epoch from batch ``skip`` on: the
        order (shuffled or not) and the augmentation key are drawn for the whole epoch."""
        be, bsz = self.be, self.be.bsz
        self.order = be.rng.permutation(self.ndata) if shuffle else np.arange(self.ndata)
        pipeline = self.maker.pipeline
        key = epoch_key(be.rng) if pipeline is not None and pipeline.is_random else 0
        self.skipped = 0
        plan = []
        for b in range(skip, self.nbatches):
            start = (b * self.nranks + self.rank) * bsz
            plan.append((self.order[np.arange(start, start + bsz) % self.ndata],
                         max(0, min(bsz, self.ndata - start))))
        if self.num_workers == 0:
            return self._made_here(plan, key)
        return self._from_workers(plan, key)

    def _made_here(self, plan, key):
        if self._host is None:
            self._host = np.empty((self.be.bsz,) + self.shape, self.out_dtype)
        for indices, valid in plan:
            used, skipped = self.maker.make(indices, key, self._host)
            yield self._set(self._host, used, skipped, valid)

    def _from_workers(self, plan, key):
        pool = self._open_pool()
        free, ready, submitted = list(range(pool.slots.shape[0])), {}, 0
        try:
            for position, (_, valid) in enumerate(plan):
                while submitted < len(plan) and free:
                    pool.submit(submitted, free.pop(), plan[submitted][0], key)
                    submitted += 1
                while position not in ready:
                    batch, slot, used, skipped = pool.receive()
                    ready[batch] = slot, used, skipped
                slot, used, skipped = ready.pop(position)
                used = plan[position][0] if used is None else used
                xt = self._set(pool.slots[slot], used, skipped, valid)
                free.append(slot)
                yield xt
        finally:
            if pool.open and pool.pending:
                try:
                    pool.drain()
                except DataError:
                    pass

    def _set(self, pixels, used, skipped, valid):
        self.valid, self.skipped = valid, self.skipped + skipped
        set_batch(self.x_buf, self.t_buf, pixels, self.maker.files.labels[used])
        return self.x_buf, self.t_buf

    def _open_pool(self):
        if self._pool is None or not self._pool.open:
            self._pool = LoaderPool(self.maker, self.num_workers, (self.be.bsz,) + self.shape,
                                    self.out_dtype, self.num_workers * self.prefetch,
                                    self.worker_timeout, self.name)
        return self._pool

    def close(self):
        """Stop the loader workers (started again by the next epoch)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
