"""The transformer layers on the GPU backend's own code with the device replaced by the host
emulator (``gpu_host_backend``): causal self-attention through the fused attention op,
head split/merge copies into and out of strided views, the GELU contract ops' op-tree
defaults, cross-attention with a padding mask and key/value widths that differ — forward and
backward against the CPU backend.  This checks the GPU glue and generated kernels, not speed."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.harness import build
from support.requires import requires

import neonlite
from neonlite.initializers import Gaussian
from neonlite.layers import MultiHeadAttention, TransformerBlock

pytestmark = requires("emulator")


@pytest.fixture
def restore_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def _run(be, make, in_shape, x, err, context=None, key_mask=None, seed=1):
    neonlite.backends._current = be
    net = build(make(), in_shape)
    layer = net.layers[0]
    attn = layer.attn if isinstance(layer, TransformerBlock) else layer
    params = np.random.default_rng(seed)
    for p in layer.parameters():
        p.value.set(params.normal(scale=0.3, size=p.value.shape))
    if context is not None:
        attn.context = be.array(context)
    if key_mask is not None:
        attn.key_mask = be.array(key_mask)
    y = net.fprop(be.array(x)).get()
    dx = net.bprop(be.array(err)).get()
    extra = attn.context_deltas.get() if context is not None else None
    return y, dx, [p.grad.get() for p in layer.parameters()], extra


def _compare(got, want, tol=2e-4):
    for g, w in zip(got, want):
        if w is None:
            continue
        if isinstance(w, list):
            _compare(g, w, tol)
            continue
        np.testing.assert_allclose(g, w, rtol=0, atol=tol * max(1.0, np.abs(w).max()))


@pytest.mark.parametrize("gelu", ["none", "tanh"])
def test_causal_transformer_block_matches_the_cpu(monkeypatch, restore_backend, gelu):
    rng = np.random.default_rng(0)
    x, err = rng.normal(size=(2, 9, 8)), rng.normal(size=(2, 9, 8))
    results = []
    for be in (host_gpu_backend(monkeypatch, batch_size=2),
               neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)):
        results.append(_run(be, lambda: TransformerBlock(8, 2, gelu=gelu,
                                                          init=Gaussian(scale=0.3)),
                            (9, 8), x, err))
    _compare(results[0], results[1])


def test_cross_attention_with_padding_and_unequal_heads_matches_the_cpu(monkeypatch,
                                                                        restore_backend):
    rng = np.random.default_rng(2)
    x, err = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 3, 8))
    context = rng.normal(size=(2, 5, 6))
    mask = np.array([[1, 1, 0, 1, 1], [1, 0, 0, 0, 1]], dtype=np.float32)
    results = []
    for be in (host_gpu_backend(monkeypatch, batch_size=2),
               neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)):
        results.append(_run(be, lambda: MultiHeadAttention(8, 2, context_shape=(5, 6), dk=4,
                                                           dv=6), (3, 8), x, err,
                            context=context, key_mask=mask))
    _compare(results[0], results[1])
