"""SequenceIterator on the GPU backend (the device replaced by the host emulator): each batch
is a contiguous view of length T' at the start of the one buffer sized for the maximum, and
holds what the CPU backend's batches hold."""
import numpy as np
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite.data.sequences import SequenceIterator

pytestmark = requires("emulator")


def _seqs():
    rng = np.random.default_rng(0)
    return [rng.integers(1, 30, size=int(n)) for n in rng.integers(2, 33, size=21)]


def _epoch(data):
    return [(x.get().copy(), t.get().copy(), data.valid) for x, t in data]


def test_gpu_batches_are_views_of_one_buffer_equal_to_the_cpus(monkeypatch):
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=3)
    cpu = _epoch(SequenceIterator(_seqs(), max_len=32, multiple_of=8))
    be = host_gpu_backend(monkeypatch, batch_size=4, seed=3)
    data = SequenceIterator(_seqs(), max_len=32, multiple_of=8)
    gpu = []
    for x, t in data:
        assert x.ptr == data._x_flat.ptr and t.ptr == data._t_flat.ptr
        assert x.is_contiguous and x.shape == t.shape == (4, x.shape[1])
        gpu.append((x.get().copy(), t.get().copy(), data.valid))
    assert be is data.be and len(gpu) == len(cpu)
    for (x, t, v), (x2, t2, v2) in zip(cpu, gpu):
        assert np.array_equal(x, x2) and np.array_equal(t, t2) and v == v2
