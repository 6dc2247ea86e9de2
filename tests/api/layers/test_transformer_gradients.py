"""Finite-difference gradient checks (float64, CPU) of the transformer layers."""
import numpy as np
import pytest
from support.harness import _assert_close, _numeric_grad, build, gradient_check

import neonlite
from neonlite.initializers import Gaussian
from neonlite.layers import (Embedding, LayerNorm, MultiHeadAttention, PositionalEmbedding,
                             TransformerBlock)


def test_layernorm():
    net = gradient_check(lambda: LayerNorm(), (3, 5), batch=2)
    assert [p.name for p in net.parameters()] == ["LayerNorm_0.gamma", "LayerNorm_0.beta"]


def test_layernorm_on_flat_features():
    gradient_check(lambda: LayerNorm(eps=1e-3), (7,), batch=3)


def test_embedding_table_gradient():
    be = neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(1)
    net = build(Embedding(5, 4), (6,))
    layer = net.layers[0]
    ids = be.array(rng.integers(0, 5, size=(3, 6)))  # repeated ids: the scatter-add must sum
    w = rng.normal(size=(3, 6, 4))

    def loss():
        return float(np.sum(w * net.fprop(ids).get()))

    net.fprop(ids)
    assert net.bprop(be.array(w)) is None
    numeric = _numeric_grad(loss, layer.W.value.get(), layer.W.value.set, 1e-6)
    _assert_close("Embedding.W", layer.W.grad.get(), numeric, 1e-5, 1e-7)
    np.testing.assert_array_equal(net.fprop(ids).get(), layer.W.value.get()[ids.get().astype(int)])


def test_positional_embedding_learned():
    net = gradient_check(lambda: PositionalEmbedding(6, 4), (4, 4), batch=2)
    assert net.layers[0].W.value.shape == (6, 4)


def test_positional_embedding_sinusoidal():
    net = gradient_check(lambda: PositionalEmbedding(6, 4, sinusoidal=True), (5, 4), batch=2)
    layer = net.layers[0]
    assert layer.parameters() == []
    table = layer.table.get()
    np.testing.assert_allclose(table[3, 0], np.sin(3.0))
    np.testing.assert_allclose(table[3, 3], np.cos(3.0 / 10000 ** 0.5))


def _attention(causal, **kw):
    return lambda: MultiHeadAttention(6, 2, causal=causal, init=Gaussian(scale=0.5), **kw)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention(causal):
    net = gradient_check(_attention(causal), (4, 6), batch=2)
    names = [p.name.split(".")[-1] for p in net.parameters()]
    assert names == ["Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo"]


def test_self_attention_different_key_and_value_widths():
    net = gradient_check(_attention(True, dk=4, dv=8), (3, 6), batch=2)
    attn = net.layers[0]
    assert attn.Wk.value.shape == (6, 4) and attn.Wv.value.shape == (6, 8)
    assert attn.Wo.value.shape == (8, 6)


def test_self_attention_with_padding_mask():
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], dtype=np.float64)

    def make():
        layer = _attention(False)()
        layer.key_mask = neonlite.get_backend().array(mask)
        return layer

    net = gradient_check(make, (5, 6), batch=2)
    be = neonlite.get_backend()
    x = np.random.default_rng(3).normal(size=(2, 5, 6))
    y = net.fprop(be.array(x)).get()
    x[0, 3:] += 1.0  # hidden keys of example 0 (also queries 3, 4)
    x[1, 1] += 1.0   # a hidden key of example 1 (also query 1)
    y2 = net.fprop(be.array(x)).get()
    np.testing.assert_allclose(y2[0, :3], y[0, :3], rtol=0, atol=1e-13)
    np.testing.assert_allclose(y2[1, [0, 2, 3, 4]], y[1, [0, 2, 3, 4]], rtol=0, atol=1e-13)


def test_self_attention_with_dropout():
    def fix_mask(net):
        net.layers[0].fixed_mask = True

    net = gradient_check(_attention(True, dropout=0.3), (4, 6), batch=2, before_check=fix_mask)
    layer, be = net.layers[0], neonlite.get_backend()
    x = be.array(np.random.default_rng(3).normal(size=(2, 4, 6)))
    trained, inferred = net.fprop(x).get(), net.fprop(x, inference=True).get()
    assert layer._drop is None and not np.allclose(trained, inferred)
    np.testing.assert_array_equal(net.fprop(x).get(), trained)  # the fixed mask again


@pytest.mark.parametrize("causal", [False, True])
def test_cross_attention(causal):
    """Tq=3 queries of width 6 attend over a context of Tk=5 positions of width 4, with
    dk=4 != dv=8 and a padding mask on the context."""
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(5)
    layer = MultiHeadAttention(6, 2, causal=causal, context_shape=(5, 4), dk=4, dv=8,
                               init=Gaussian(scale=0.5))
    net = build(layer, (3, 6))
    for p in net.parameters():
        p.value.set(p.value.get() + rng.normal(0, 0.1, p.value.shape))
    x, c = rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 5, 4))
    x_t, c_t = be.array(x), be.array(c)
    mask = be.array(np.array([[1, 1, 1, 1, 0], [1, 1, 0, 1, 1]], dtype=np.float64))
    w = rng.normal(size=(2, 3, 6))

    def loss():
        return float(np.sum(w * layer.fprop(x_t, context=c_t, key_mask=mask).get()))

    for p in net.parameters():
        p.grad[:] = 0
    layer.fprop(x_t, context=c_t, key_mask=mask)
    dx = layer.bprop(be.array(w)).get()
    dc = layer.context_deltas.get()
    grads = {p.name: p.grad.get() for p in net.parameters()}
    assert layer.Wk.value.shape == (4, 4) and layer.Wv.value.shape == (4, 8)
    _assert_close("input", dx, _numeric_grad(loss, x.copy(), x_t.set, 1e-6), 1e-5, 1e-7)
    _assert_close("context", dc, _numeric_grad(loss, c.copy(), c_t.set, 1e-6), 1e-5, 1e-7)
    for p in net.parameters():
        numeric = _numeric_grad(loss, p.value.get(), p.value.set, 1e-6)
        _assert_close(p.name, grads[p.name], numeric, 1e-5, 1e-7)


@pytest.mark.parametrize("causal,gelu", [(True, "none"), (False, "tanh")])
def test_transformer_block(causal, gelu):
    net = gradient_check(lambda: TransformerBlock(8, 2, mlp_ratio=2, causal=causal, gelu=gelu,
                                                  name="block0"), (3, 8), batch=2)
    shapes = {p.name: p.value.shape for p in net.parameters()}
    assert shapes["block0.fc1.W"] == (8, 16) and shapes["block0.fc2.W"] == (16, 8)
    assert shapes["block0.attn.Wq"] == (8, 8) and shapes["block0.ln1.gamma"] == (8,)
    assert len(shapes) == 16


def test_transformer_block_with_dropout():
    def fix_masks(net):
        block = net.layers[0]
        block.attn.fixed_mask = True
        block.drop1.fixed_mask = block.drop2.fixed_mask = True

    gradient_check(lambda: TransformerBlock(8, 2, mlp_ratio=2, dropout=0.2), (3, 8), batch=2,
                   before_check=fix_masks)
