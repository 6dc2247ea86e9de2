"""The data position of a training run, and the one way an epoch is resumed from it.

The position is one record in the checkpoint (``/progress`` ``epoch_index`` and
``batch_index``, and ``/rng`` ``epoch_start``: the host RNG state at the start of the epoch,
see :mod:`neonlite.serialize`).  Every iterator draws its epoch's randomness (shuffle order,
bucket order, augmentation keys) from the backend's host RNG when the epoch starts, so the
restored state replays the same epoch, and ``batch_index`` says how many of its batches were
trained already.

An iterator that can start an epoch part-way without producing the batches before it (no
decoding, no copies) defines ``batches_from(skip)``: a generator of the epoch's batches from
batch ``skip`` on, drawing exactly the host RNG that a whole epoch draws.  Others are
iterated from the start and their first ``skip`` batches dropped.
"""


def epoch_batches(dataset, skip=0):
    """Yield ``(batch, (x, t))`` for one epoch of ``dataset`` from batch number ``skip``
    (counted from 0), through ``dataset.batches_from(skip)`` where it has one."""
    start = getattr(dataset, "batches_from", None)
    if start is not None:
        yield from enumerate(start(skip), skip)
        return
    for batch, xt in enumerate(dataset):
        if batch >= skip:
            yield batch, xt


class EpochBatches:
    """What an iterator of this protocol shares: ``len`` (``self.nbatches``), iteration (one
    epoch, shuffled as ``self.shuffle`` says) and ``batches_from(skip)``, all through the
    iterator's own ``batches(shuffle, skip=0)``, which draws the whole epoch's randomness
    whatever ``skip`` is."""

    def __len__(self):
        return self.nbatches

    def __iter__(self):
        return self.batches(self.shuffle)

    def batches_from(self, skip):
        """The epoch's batches from batch ``skip`` on."""
        return self.batches(self.shuffle, skip)
