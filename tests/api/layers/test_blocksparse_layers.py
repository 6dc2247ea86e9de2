"""Block-sparse layers: float64 gradient checks for every block size and random, banded and
strided layouts (with an empty and a full row of blocks, Tq != Tk, causal diagonal blocks),
agreement with the dense layers they restrict, and the configure-time errors."""
import numpy as np
import pytest
from support.harness import build, gradient_check

import neonlite
from neonlite.blocksparse import layouts
from neonlite.layers import (BlockSparseAffine, BlockSparseAttention, BlockSparseLinear,
                             Linear, MultiHeadAttention)

BLOCK_SIZES = (8, 16, 32, 64)
KINDS = ("random", "banded", "strided")


def linear_layout(kind, shape, seed=0):
    """A (rows, cols) layout of ``kind`` with row 0 full and row 1 empty."""
    layout = {"random": lambda: layouts.random(shape, 0.5, seed),
              "banded": lambda: layouts.banded(shape, 2),
              "strided": lambda: layouts.strided(shape, 2)}[kind]()
    layout[0] = 1
    layout[1] = 0
    return layout


@pytest.mark.parametrize("bs", BLOCK_SIZES)
@pytest.mark.parametrize("kind", KINDS)
def test_blocksparse_linear_gradients(bs, kind):
    shape = (3, 3) if bs < 64 else (3, 2)
    layout = linear_layout(kind, shape, seed=bs)
    assert layout[0].all() and not layout[1].any()
    net = gradient_check(lambda: BlockSparseLinear(shape[1] * bs, layout, bs),
                         (shape[0] * bs,), batch=2, atol=1e-6)
    layer = net.layers[0]
    assert layer.W.value.shape == (int(layout.sum()), bs, bs)


def test_blocksparse_linear_per_token_and_affine_gradients():
    layout = linear_layout("random", (2, 3), seed=3)
    gradient_check(lambda: BlockSparseAffine(24, layout, 8), (5, 16), batch=2, atol=1e-6)


def attention_layout(kind, heads, nq, nk, seed=0):
    """An (H, nq, nk) layout of ``kind`` whose head 0 has an empty first row and a full last
    row (the causal mask keeps the full row's blocks up to the diagonal)."""
    shape = (heads, nq, nk)
    layout = {"random": lambda: layouts.random(shape, 0.5, seed),
              "banded": lambda: layouts.banded(shape, 1),
              "strided": lambda: layouts.strided(shape, 2)}[kind]()
    layout[0, 0] = 0
    layout[0, -1] = 1
    return layout


@pytest.mark.parametrize("bs", BLOCK_SIZES)
@pytest.mark.parametrize("kind", KINDS)
def test_blocksparse_attention_gradients_causal_self(bs, kind):
    heads, nq = 2, 3 if bs <= 16 else 2
    layout = attention_layout(kind, heads, nq, nq, seed=bs)
    net = gradient_check(lambda: BlockSparseAttention(heads, layout, bs, causal=True),
                         (nq * bs, 4), batch=2, atol=1e-6)
    plan = net.layers[0].plan
    assert not plan.layout[0, 0].any(), "the empty row stays empty"
    assert plan.layout[0, -1].all(), "the full row keeps every block up to the diagonal"
    assert (np.triu(np.ones((nq, nq)), 1) * plan.layout).sum() == 0, "causal layout"


@pytest.mark.parametrize("bs", (8, 16))
@pytest.mark.parametrize("causal", (False, True))
def test_blocksparse_attention_gradients_cross(bs, causal):
    """Tq != Tk: 2 query blocks over 3 key blocks (the queries are the last positions)."""
    heads, nq, nk = 2, 2, 3
    layout = attention_layout("random", heads, nq, nk, seed=7)
    rng = np.random.default_rng(5)
    context = rng.normal(size=(2, nk * bs, 6))

    def make():
        layer = BlockSparseAttention(heads, layout, bs, causal=causal,
                                     context_shape=(nk * bs, 6))
        layer.context = neonlite.get_backend().array(context)
        return layer
    gradient_check(make, (nq * bs, 4), batch=2, atol=1e-6)


def test_blocksparse_attention_context_gradient():
    """The error for the context (cross-attention) against finite differences."""
    bs, heads, nq, nk = 8, 2, 2, 3
    layout = attention_layout("strided", heads, nq, nk)
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(1)
    c = rng.normal(size=(2, nk * bs, 6))
    x = be.array(rng.normal(size=(2, nq * bs, 4)))
    net = build(BlockSparseAttention(heads, layout, bs, context_shape=(nk * bs, 6)),
                (nq * bs, 4))
    layer = net.layers[0]
    w = rng.normal(size=(2, nq * bs, 4))

    def loss(cv):
        layer.context = be.array(cv)
        return float(np.sum(w * net.fprop(x).get()))
    loss(c)
    net.bprop(be.array(w))
    analytic = layer.context_deltas.get()
    eps, numeric = 1e-6, np.zeros_like(c)
    for i in range(c.size):
        plus, minus = c.copy().reshape(-1), c.copy().reshape(-1)
        plus[i] += eps
        minus[i] -= eps
        numeric.reshape(-1)[i] = (loss(plus.reshape(c.shape)) - loss(minus.reshape(c.shape))) \
            / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_full_layouts_equal_the_dense_layers():
    """With every block stored, the block-sparse layers compute what the dense ones do."""
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 32, 16))
    sparse = build(BlockSparseLinear(32, np.ones((2, 4)), 8), (32, 16)).layers[0]
    dense = build(Linear(32), (32, 16)).layers[0]
    dense.W.value.set(sparse.dense_weight())
    np.testing.assert_allclose(sparse.fprop(be.array(x)).get(),
                               dense.fprop(be.array(x)).get(), rtol=1e-12, atol=1e-12)
    bsa = build(BlockSparseAttention(2, np.ones((4, 4)), 8, causal=True), (32, 16)).layers[0]
    mha = build(MultiHeadAttention(16, 2, causal=True), (32, 16)).layers[0]
    for p, q in zip(bsa.parameters(), mha.parameters()):
        q.value.set(p.value.get())
    np.testing.assert_allclose(bsa.fprop(be.array(x)).get(), mha.fprop(be.array(x)).get(),
                               rtol=1e-10, atol=1e-12)


def test_initializer_sees_each_columns_real_fan_in():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    layout = np.zeros((8, 2), dtype=np.uint8)
    layout[:, 0] = 1
    layout[0, 1] = 1
    from neonlite.initializers import Kaiming
    layer = build(BlockSparseLinear(64, layout, 32, init=Kaiming()), (256,)).layers[0]
    w = layer.W.value.get()
    wide, narrow = w[[k for k in range(len(w)) if k != 1]], w[1]
    assert layer.plan.tables.col[1] == 1
    assert abs(wide.std() - np.sqrt(2.0 / 256)) < 0.1 * np.sqrt(2.0 / 256)
    assert abs(narrow.std() - np.sqrt(2.0 / 32)) < 0.1 * np.sqrt(2.0 / 32)


# ---- bad input at configure time ------------------------------------------------------------
def configure(layer, in_shape):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    return build(layer, in_shape)


def test_layout_shape_that_does_not_fit_the_layer():
    with pytest.raises(ValueError, match=r"layout has shape \(3, 2\) blocks, expected .*"
                                         r"\(4, 2\) for nin=32, nout=16, block_size=8"):
        configure(BlockSparseLinear(16, np.ones((3, 2)), 8, name="bsl"), (32,))
    with pytest.raises(ValueError, match=r"'attn'.*layout has shape \(2, 3\) blocks, expected "
                                         r"\(Tq/bs, Tk/bs\) = \(4, 4\)"):
        configure(BlockSparseAttention(2, np.ones((2, 3)), 8, name="attn"), (32, 8))
    with pytest.raises(ValueError, match="not a multiple of block_size=16"):
        configure(BlockSparseAttention(2, np.ones((2, 2)), 16, name="attn"), (40, 8))
    with pytest.raises(ValueError, match=r"nin=20\) a multiple of block_size=8"):
        configure(BlockSparseLinear(16, np.ones((3, 2)), 8), (20,))


@pytest.mark.parametrize("bs", (4, 12, 128, "32"))
def test_unsupported_block_size(bs):
    with pytest.raises(ValueError, match=r"block_size must be one of \(8, 16, 32, 64\)"):
        configure(BlockSparseLinear(16, np.ones((2, 2)), bs), (32,))
    with pytest.raises(ValueError, match=r"block_size must be one of \(8, 16, 32, 64\)"):
        configure(BlockSparseAttention(2, np.ones((2, 2)), bs), (32, 8))


def test_all_zero_layout():
    with pytest.raises(ValueError, match=r"'bsl'.*has no blocks \(all zeros\)"):
        configure(BlockSparseLinear(16, np.zeros((4, 2)), 8, name="bsl"), (32,))
    upper = np.triu(np.ones((4, 4)), 1)
    with pytest.raises(ValueError, match="no blocks below the causal diagonal"):
        configure(BlockSparseAttention(2, upper, 8, causal=True), (32, 8))


def test_bad_layout_values_and_specs():
    with pytest.raises(ValueError, match="entries must be 0 or 1"):
        configure(BlockSparseLinear(16, np.full((4, 2), 2), 8), (32,))
    with pytest.raises(ValueError, match=r"layout.lokal: unknown layout pattern"):
        configure(BlockSparseLinear(16, {"lokal": {"window": 2}}, 8), (32,))
    with pytest.raises(ValueError, match=r"layout.local: .*windo"):
        configure(BlockSparseLinear(16, {"local": {"windo": 2}}, 8), (32,))


def test_transformer_block_takes_block_sparse_sublayers_and_checks_them():
    from neonlite.layers import TransformerBlock
    layout = {"balanced": {"density": 0.5}}
    block = TransformerBlock(16, 2, attention=BlockSparseAttention(2, {"local": {"window": 2}},
                                                                    8),
                             fc1=BlockSparseAffine(64, layout, 8),
                             fc2=BlockSparseAffine(16, layout, 8), name="b")
    net = configure(block, (32, 16))
    assert {p.name for p in net.parameters()} >= {"b.attn.Wq", "b.fc1.W", "b.fc1.b", "b.fc2.W"}
    with pytest.raises(TypeError, match="fc2 must be a core layer \\+ optional Bias compound"):
        TransformerBlock(16, 2, fc2=BlockSparseLinear(16, layout, 8))
