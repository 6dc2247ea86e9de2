"""Gradient buckets: parameters grouped in bprop order into messages of about
``bucket_bytes``, each allreduced as soon as the last of its layers has run bprop.

A bucket is a contiguous host buffer (float32, or float64 for float64 gradients) holding
the flattened gradients of its parameters one after another; it is summed in place by one
non-blocking ``MPI_Iallreduce`` and divided by the number of ranks (host staging: the CPU
backend copies arrays, a GPU backend copies device <-> host).  Where a bucket's parameters
lie side by side in the model's parameter arena (:mod:`neonlite.optimizers.arena`; buckets are
planned in bprop order, so consecutive parameters usually do) its buffer *is* that run of the
arena's gradient buffer: no staging copies, and the average is taken in place.
"""
import time

import numpy as np

DEFAULT_BUCKET_BYTES = 1 << 20


def plan_buckets(params, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Split ``params`` (in bprop order: the last layer's first) into lists whose gradients
    hold at least ``bucket_bytes`` each (the last one may hold less)."""
    if not isinstance(bucket_bytes, (int, np.integer)) or bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be a positive integer, got {bucket_bytes!r}")
    buckets, current, size = [], [], 0
    for p in params:
        current.append(p)
        size += p.grad.size * _stage_dtype(p.grad.dtype).itemsize
        if size >= bucket_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


def _stage_dtype(dtype):
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _arena_run(params, dtype):
    """The view of the arena gradient buffer that holds exactly ``params``' gradients (and the
    alignment padding between them, which is zero), or None when they are not side by side
    in one arena buffer of ``dtype``."""
    arena = getattr(params[0], "arena", None)
    if arena is None or any(getattr(p, "arena", None) is not arena for p in params):
        return None
    slots = sorted((arena.slot(p) for p in params), key=lambda s: s.offset)
    if any(s.dtype != dtype for s in slots):
        return None
    if any(a.offset + a.padded != b.offset for a, b in zip(slots, slots[1:])):
        return None
    return arena.grads[dtype][slots[0].offset:slots[-1].offset + slots[-1].padded]


class HostBucket:
    """The parameters of one bucket and their host staging buffer ``buf`` (n,).

    ``owners`` is the set of layers whose bprop fills these gradients; ``pending`` the ones
    not yet run this step.
    """

    def __init__(self, index, params):
        self.index, self.params = index, list(params)
        self.owners = {id(p.layer): p.layer for p in self.params}
        dtype = _stage_dtype(self.params[0].grad.dtype)
        self.offsets = np.cumsum([0] + [p.grad.size for p in self.params])
        self.buf = _arena_run(self.params, dtype)
        self.in_arena = self.buf is not None
        if self.buf is None:
            self.buf = np.empty(int(self.offsets[-1]), dtype=dtype)
        self.request = None
        self.reset()

    @property
    def nbytes(self):
        return self.buf.nbytes

    def reset(self):
        self.pending = set(self.owners)
        self.request = None

    def stage(self):
        """Copy every gradient into ``buf`` (nothing to do when ``buf`` is the arena's)."""
        if self.in_arena:
            return
        for p, a, b in zip(self.params, self.offsets[:-1], self.offsets[1:]):
            self.buf[a:b] = np.asarray(p.grad).reshape(-1)

    def unstage(self, scale, in_place=False):
        """Write ``buf * scale`` back into the gradients; ``in_place``: the gradients are host
        tensors whose ``numpy.asarray`` is their own memory (the CPU backend's), written in
        the same pass as the scaling."""
        if self.in_arena:
            self.buf *= scale
            return
        if in_place:
            for p, a, b in zip(self.params, self.offsets[:-1], self.offsets[1:]):
                target = np.asarray(p.grad)
                np.multiply(self.buf[a:b].reshape(target.shape), scale, out=target,
                            casting="unsafe")
            return
        self.buf *= scale
        for p, a, b in zip(self.params, self.offsets[:-1], self.offsets[1:]):
            p.grad.set(self.buf[a:b])


class HostTransport:
    """Bucket allreduce through MPI with host staging; ``in_place``: the gradients are host
    arrays (the CPU backend's), written back in the pass that averages them.  With a
    ``progress`` thread (:mod:`.progress`) the transfers advance on their own during bprop;
    without one, each layer's end tests the started requests (:meth:`poke`), the only other
    progress point."""

    name = "mpi"

    def __init__(self, collectives, world_size, progress=None, in_place=False):
        self.collectives, self.scale = collectives, 1.0 / world_size
        self.progress, self.in_place = progress, in_place

    def make_bucket(self, index, params):
        return HostBucket(index, params)

    def start(self, bucket, backend):
        backend.synchronize()
        bucket.stage()
        bucket.request = self.collectives.iallreduce(bucket.buf)
        if self.progress is not None:
            self.progress.busy()

    def poke(self, buckets):
        if self.progress is not None:
            return
        requests = [b.request for b in buckets if b.request is not None]
        if requests:
            self.collectives.test(requests)

    def finish(self, buckets, step):
        """Wait for every bucket's allreduce and write the averages back; returns the seconds
        spent waiting (the communication bprop did not hide)."""
        begin = time.perf_counter()
        try:
            self.collectives.wait([b.request for b in buckets],
                                  f"gradient allreduce of step {step} ({len(buckets)} buckets)")
        finally:
            if self.progress is not None:
                self.progress.idle()
        waited = time.perf_counter() - begin
        for bucket in buckets:
            bucket.unstage(self.scale, self.in_place)
        return waited
