"""Prefetching (``backends/gpu_prefetch.py``): the next batch's copy is queued before the
current batch is handed out, into the other of two buffer pairs, after the event that ends that
pair's previous use; the batches and their ``valid`` counts are the plain iterator's.  The
ordering is checked with a recording stand-in for the GPU backend's two calls (``copy_async``,
``compute_event``), so it runs anywhere; the real copies run in the GPU test at the end."""
import numpy as np
import pytest
from support.harness import make_backend

import neonlite
from neonlite.backends.gpu.prefetch import Prefetched, prefetched
from neonlite.data import ArrayIterator


class _Event:
    def __init__(self, log, label):
        self.label, self.log = label, log

    def synchronize(self):
        self.log.append(("wait", self.label))


class _Tensor:
    """A contiguous 'device' tensor in host memory."""

    def __init__(self, shape, dtype):
        self.ary = np.zeros(shape, dtype)
        self.shape, self.dtype, self.size = self.ary.shape, self.ary.dtype, self.ary.size
        self.itemsize, self.is_contiguous = self.ary.itemsize, True

    def host_bits(self, ary):
        return np.ascontiguousarray(ary, self.dtype)


class _RecordingBackend:
    def __init__(self):
        self.log, self.events = [], 0

    def empty(self, shape, dtype):
        return _Tensor(shape, dtype)

    def pinned_empty(self, shape, dtype):
        return np.zeros(shape, dtype)

    def copy_async(self, t, pinned, after=None):
        t.ary[...] = pinned
        self.log.append(("copy", id(t), None if after is None else after.label))
        return _Event(self.log, f"copy{sum(1 for e in self.log if e[0] == 'copy')}")

    def wait_for(self, event):
        self.log.append(("compute waits", event.label))

    def compute_event(self):
        self.events += 1
        self.log.append(("event", f"e{self.events}"))
        return _Event(self.log, f"e{self.events}")


@pytest.fixture
def data():
    previous = neonlite.backends._current
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    X = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    yield ArrayIterator(X, np.arange(10) % 2, nclass=2, shuffle=False)
    neonlite.backends._current = previous


def test_same_batches_and_valid_counts_with_the_copy_one_ahead(data):
    plain = [(x.get().copy(), t.get().copy(), data.valid) for x, t in data.batches(False)]
    be = _RecordingBackend()
    pre = prefetched(data, be)
    assert isinstance(pre, Prefetched)
    got, copies_at_handout = [], []
    for x, t in pre.batches(False):
        copies_at_handout.append(sum(1 for e in be.log if e[0] == "copy"))
        got.append((x.ary.copy(), t.ary.copy(), pre.valid))
    assert len(got) == len(plain) == 3
    for (gx, gt, gv), (px, pt, pv) in zip(got, plain):
        np.testing.assert_array_equal(gx, px)
        np.testing.assert_array_equal(gt, pt)
        assert gv == pv
    assert [v for _, _, v in got] == [4, 4, 2]
    # two copies (x and t) per batch; batch i+1's are queued before batch i is handed out
    assert copies_at_handout == [4, 6, 6]
    assert data.x_buf.__class__.__name__ == "CPUTensor", "the iterator's buffers are restored"


def test_a_pair_is_refilled_only_after_its_previous_use(data):
    be = _RecordingBackend()
    pre = Prefetched(data, be)
    x_ids = [id(pair[0].tensor) for pair in pre._pairs]
    handed = [id(x) for x, _ in pre.batches(False)]
    assert handed == [x_ids[0], x_ids[1], x_ids[0]]
    copies = [e for e in be.log if e[0] == "copy"]
    assert [after for _, _, after in copies[:4]] == [None] * 4
    # batch 2 goes into pair 0 after e1, the event recorded once batch 0's step was queued
    assert [after for _, _, after in copies[4:]] == ["e1", "e1"]
    assert be.log.index(("event", "e1")) < be.log.index(copies[4])


def test_cpu_backend_iterators_are_left_alone(data):
    assert prefetched(data, neonlite.backends.get_backend()) is data
    assert prefetched(None, _RecordingBackend()) is None


def test_real_copies_on_the_gpu_overlap_and_match():
    be = make_backend("gpu", batch_size=8)
    X = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
    data = ArrayIterator(X, None, shuffle=False)
    plain = [x.get().copy() for x, _ in data.batches(False)]
    pre = prefetched(data, be)
    got = [x.get().copy() for x, _ in pre.batches(False)]
    assert len(got) == len(plain)
    for g, p in zip(got, plain):
        np.testing.assert_array_equal(g, p)


def test_a_limit_stops_reading_ahead(data):
    """With ``limit`` (the CLI's --max-batches) the source is never asked for more batches."""
    be = _RecordingBackend()
    pulled = []
    source_batches = data.batches

    def counting(shuffle):
        for i, batch in enumerate(source_batches(shuffle)):
            pulled.append(i)
            yield batch
    data.batches = counting
    got = list(prefetched(data, be, limit=2).batches(False))
    assert len(got) == 2 and pulled == [0, 1]


def test_compute_waits_for_a_copy_only_when_its_batch_is_handed_out(data):
    """Batch 1's copies are queued before batch 0 is handed out, but compute is made to wait
    for them only after batch 0's step (so that step overlaps them)."""
    be = _RecordingBackend()
    marks = []
    for i, _ in enumerate(prefetched(data, be).batches(False)):
        marks.append(len(be.log))
        be.log.append(("step", i))
    waits = [e[1] for e in be.log if e[0] == "compute waits"]
    assert waits == ["copy1", "copy2", "copy3", "copy4", "copy5", "copy6"]
    order = [e for e in be.log if e[0] in ("step", "compute waits")]
    assert order.index(("compute waits", "copy3")) > order.index(("step", 0))
    assert order.index(("compute waits", "copy2")) < order.index(("step", 0))
