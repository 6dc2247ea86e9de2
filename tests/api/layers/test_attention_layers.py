"""The attention layers on the fused op: the same training-path results and generated
characters as the unfused computation they ran before, block-sparse attention with a full
layout equal to dense attention, and one clear error naming the layer for bad input."""
from support import attention_unfused
import numpy as np
import pytest
from support.harness import build
from support.tiny_lm import trained_tiny_lm, write_text_file

import neonlite
from neonlite.generation import generate
from neonlite.initializers import Gaussian
from neonlite.layers import BlockSparseAttention, MultiHeadAttention, TransformerBlock


@pytest.fixture
def text_file(tmp_path):
    return write_text_file(tmp_path)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_decoding_gives_the_same_characters_as_the_unfused_path(text_file, dtype, monkeypatch):
    model, corpus = trained_tiny_lm(text_file, dtype=dtype, steps=20)
    kw = dict(prompt="the q", n=40, temperature=0.9, top_k=10, seed=7)
    fused = [generate(model, corpus, use_cache=cache, **kw) for cache in (True, False)]
    attention_unfused.patch(monkeypatch, model.be)
    unfused = [generate(model, corpus, use_cache=cache, **kw) for cache in (True, False)]
    assert fused == unfused and fused[0] == fused[1]


@pytest.mark.parametrize("make", [
    lambda: TransformerBlock(8, 2, name="b"),
    lambda: MultiHeadAttention(8, 2, causal=True, dropout=0.25, name="b")])
def test_layers_match_the_unfused_path(make, monkeypatch):
    be = neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(0)
    x, err = be.array(rng.normal(size=(3, 70, 8))), be.array(rng.normal(size=(3, 70, 8)))
    results = []
    for unfused in (False, True):
        if unfused:
            attention_unfused.patch(monkeypatch, be)
        net = build(make(), (70, 8))
        params = np.random.default_rng(1)
        for p in net.parameters():
            p.value.set(params.normal(scale=0.3, size=p.value.shape))
        y = net.fprop(x).get()
        dx = net.bprop(err).get()
        results.append((y, dx, [p.grad.get() for p in net.parameters()]))
    (y0, dx0, g0), (y1, dx1, g1) = results
    np.testing.assert_allclose(y0, y1, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(dx0, dx1, rtol=1e-10, atol=1e-11)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-11)


def test_block_sparse_with_a_full_layout_equals_dense_attention():
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(1)
    x, err = be.array(rng.normal(size=(2, 64, 8))), be.array(rng.normal(size=(2, 64, 8)))
    outs = []
    for layer in (MultiHeadAttention(8, 2, causal=True, name="a"),
                  BlockSparseAttention(2, np.ones((4, 4)), 16, causal=True, d_model=8,
                                       name="a")):
        net = build(layer, (64, 8))
        params = np.random.default_rng(2)
        for p in net.parameters():
            p.value.set(params.normal(scale=0.3, size=p.value.shape))
        outs.append((net.fprop(x).get(), net.bprop(err).get()))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-11, atol=1e-12)


def test_bad_input_is_one_clear_error_naming_the_layer():
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    net = build(MultiHeadAttention(4, 2, name="attn"), (3, 4))
    with pytest.raises(ValueError, match=r"'attn' \(MultiHeadAttention\): key_mask must have "
                                         r"shape \(2, 3\)"):
        net.layers[0].fprop(be.zeros((2, 3, 4)), key_mask=be.ones((2, 5)))
    with pytest.raises(ValueError, match=r"'xattn' \(MultiHeadAttention\): causal attention "
                                         r"with more queries \(Tq=6\) than keys \(Tk=4\)"):
        build(MultiHeadAttention(4, 2, causal=True, context_shape=(4, 4), name="xattn"), (6, 4))
    with pytest.raises(ValueError, match=r"'wide' \(MultiHeadAttention\): head width 512 .*"
                                         r"wider than 256"):
        build(MultiHeadAttention(512, 1, name="wide"), (3, 512))
