"""A model of sequences of at most T steps on the GPU backend's own code, the device replaced
by the host emulator: batches of lengths T, T/3, T/2, T train with the losses of the CPU
backend, and after the first batch no device memory is allocated and no kernel compiled
(the later lengths run on views of the buffers made for T, with the kernels made for T)."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.layers import (LSTM, Affine, BiGRU, Embedding, GeneralizedCost, MeanPool,
                             PositionalEmbedding, TransformerBlock)
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Softmax

pytestmark = requires("emulator")

BSZ, T, VOCAB, D, PAD = 2, 12, 9, 8, 0


@pytest.fixture
def restore_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def _model():
    return Model([Embedding(VOCAB, D, pad_id=PAD, name="emb"), PositionalEmbedding(T),
                  TransformerBlock(D, 2, name="b0"), LSTM(D), BiGRU(D, merge="sum"),
                  Affine(VOCAB, activation=Softmax(), name="head")])


def _batches(be, lengths):
    rng = np.random.default_rng(0)
    out = []
    for steps in lengths:
        ids = rng.integers(1, VOCAB, (BSZ, steps)).astype(np.float32)
        ids[1, steps // 2 + 1:] = PAD  # the second sequence is padded
        targets = rng.integers(0, VOCAB, (BSZ, steps))
        out.append((be.array(ids), be.array(targets, dtype=np.int32)))
    return out


def test_lengths_t_t3_t2_t_follow_the_cpu_and_allocate_and_compile_nothing_new(
        monkeypatch, restore_backend):
    lengths = (T, T // 3, T // 2, T)
    losses, outputs = {}, {}
    for name in ("gpu", "cpu"):
        be = host_gpu_backend(monkeypatch, batch_size=BSZ) if name == "gpu" else \
            neonlite.gen_backend("cpu", batch_size=BSZ, rng_seed=0)
        model = _model()
        model.initialize(ArrayIterator(np.zeros((BSZ, T)), np.zeros((BSZ, T, VOCAB)),
                                       shuffle=False),
                         GeneralizedCost(CrossEntropyMulti(ignore_index=PAD)))
        params = np.random.default_rng(1)
        for p in model.parameters():
            p.value.set(params.normal(scale=0.3, size=p.value.shape))
        optimizer = Adam(1e-2)
        losses[name], counts = [], []
        for x, t in _batches(be, lengths):
            losses[name].append(model.train_step(x, t, optimizer, 0))
            if name == "gpu":
                counts.append((be.device.allocations, len(be.device.modules)))
        outputs[name] = model.fprop(_batches(be, (5,))[0][0], inference=True).get()
        if name == "gpu":
            assert counts == counts[:1] * len(lengths), \
                f"(device allocations, compiled modules) after each batch: {counts}"
    np.testing.assert_allclose(losses["gpu"], losses["cpu"], rtol=2e-4)
    np.testing.assert_allclose(outputs["gpu"], outputs["cpu"], rtol=0, atol=2e-4)


def test_mean_pool_of_padded_batches_of_any_length_follows_the_cpu(monkeypatch, restore_backend):
    got = {}
    for name in ("gpu", "cpu"):
        be = host_gpu_backend(monkeypatch, batch_size=BSZ) if name == "gpu" else \
            neonlite.gen_backend("cpu", batch_size=BSZ, rng_seed=0)
        model = Model([Embedding(VOCAB, D, pad_id=PAD), TransformerBlock(D, 2, causal=False),
                       MeanPool()])
        model.initialize(ArrayIterator(np.zeros((BSZ, T)), shuffle=False))
        params = np.random.default_rng(1)
        for p in model.parameters():
            p.value.set(params.normal(scale=0.3, size=p.value.shape))
        got[name] = [model.fprop(x, inference=True).get() for x, _ in _batches(be, (7, 3, T))]
    for gpu, cpu in zip(got["gpu"], got["cpu"]):
        np.testing.assert_allclose(gpu, cpu, rtol=0, atol=2e-4)
