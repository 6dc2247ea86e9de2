"""Overlapping the next batch's host-to-device copy with the current batch's compute.

:class:`Prefetched` wraps any of the data iterators (they share one protocol: device buffers
``x_buf`` / ``t_buf`` filled by ``.set()`` inside the ``batches(shuffle)`` generator, and
``valid`` for the batch just filled).  It gives the iterator two pairs of *staged* buffers in
turn and runs its generator one batch ahead: batch i + 1 is filled, and its copy queued on the
device's copy stream, before batch i is handed to the training step, so the copy runs while
batch i computes.

A staged buffer's ``set`` (:class:`StagedTensor`) converts the host array to the storage type
in a page-locked host buffer and queues ``memcpy_htod_async`` on the copy stream after the
event that marks the end of the buffer's previous use; only when the batch is handed out does
the compute stream wait for the copy's completion event (so batch i's kernels never wait for
batch i + 1's copy).  The host never waits for the device (except, briefly, before reusing its
own page-locked buffer while that buffer's previous copy is still running).

The CPU backend has nothing to overlap: :func:`prefetched` returns its iterators unchanged.
"""
import numpy as np


class StagedTensor:
    """A contiguous device tensor whose ``set`` is an asynchronous copy from page-locked memory
    on the copy stream (see the module docstring).  Everything else is the wrapped tensor's."""

    def __init__(self, tensor, be):
        self._tensor, self._be = tensor, be
        self._pinned = be.pinned_empty(tensor.shape, tensor.dtype)
        self.copied = None
        self.free = None

    def set(self, ary):
        ary = np.asarray(ary)
        t = self._tensor
        if ary.shape != t.shape and ary.size != t.size:
            raise ValueError(f"cannot set a tensor of shape {t.shape} from an array of shape "
                             f"{ary.shape}")
        if self.copied is not None:
            self.copied.synchronize()
        np.copyto(self._pinned, t.host_bits(ary.reshape(t.shape)).reshape(self._pinned.shape),
                  casting="no")
        self.copied = self._be.copy_async(t, self._pinned, after=self.free)
        return self

    def __getattr__(self, name):
        return getattr(self._tensor, name)

    @property
    def tensor(self):
        """The device tensor itself (what the training step reads)."""
        return self._tensor


class Prefetched:
    """``data`` with its next batch copied while the current one computes (module docstring).
    ``valid`` is the number of real rows of the batch last handed out; every other attribute
    is ``data``'s.  ``limit``: read at most this many batches per epoch (so reading ahead never
    draws a batch, and its random numbers, that a ``--max-batches`` run would not)."""

    def __init__(self, data, be, limit=None):
        self.data, self._be, self.limit = data, be, limit
        shared = data.t_buf is data.x_buf
        self._pairs = []
        for _ in range(2):
            x = StagedTensor(be.empty(data.x_buf.shape, data.x_buf.dtype), be)
            t = x if shared else StagedTensor(be.empty(data.t_buf.shape, data.t_buf.dtype), be)
            self._pairs.append((x, t))
        self.valid = getattr(data, "valid", None)

    def __len__(self):
        return len(self.data)

    def __iter__(self):
        return self.batches(getattr(self.data, "shuffle", False))

    def batches(self, shuffle):
        """Batch i + 1 is filled (its copy queued) before batch i is handed out."""
        data = self.data
        original = data.x_buf, data.t_buf
        source = data.batches(shuffle)
        pending, k, filled = [], 0, 0
        try:
            while self.limit is None or filled < self.limit:
                entry = self._fill(source, k)
                filled += 1
                if entry is None:
                    break
                pending.append(entry)
                k = 1 - k
                if len(pending) == 2:
                    yield from self._hand_out(pending.pop(0))
            while pending:
                yield from self._hand_out(pending.pop(0))
        finally:
            data.x_buf, data.t_buf = original
            source.close()

    def _fill(self, source, k):
        x, t = self._pairs[k]
        self.data.x_buf, self.data.t_buf = x, t
        got = next(source, None)
        if got is None:
            return None
        if got[0] is not x:
            raise TypeError(f"{type(self.data).__name__} does not yield the x_buf it fills, so "
                            f"its batches cannot be prefetched")
        return x, t, getattr(self.data, "valid", None)

    def _hand_out(self, entry):
        """Make compute wait for the pair's copies, then yield it; when the consumer asks for
        the next batch, the work it queued on this pair ends at an event recorded on the
        compute stream then: the pair's next copy waits for it."""
        x, t, self.valid = entry
        for staged in {id(s): s for s in (x, t)}.values():
            if staged.copied is not None:
                self._be.wait_for(staged.copied)
        yield x.tensor, t.tensor
        x.free = t.free = self._be.compute_event()

    def __getattr__(self, name):
        return getattr(self.data, name)


def prefetched(data, be, limit=None):
    """``data`` wrapped in :class:`Prefetched` when backend ``be`` can copy asynchronously
    (``copy_async``, ``wait_for``, ``compute_event``) and ``data`` follows the iterator
    protocol; else ``data`` itself."""
    if data is None or not hasattr(be, "copy_async"):
        return data
    if not all(hasattr(data, a) for a in ("x_buf", "t_buf", "batches")):
        return data
    return Prefetched(data, be, limit)
