"""MultiHeadAttention's causal score GEMMs in row blocks (each block with the keys up to its
last query) and its head split/merge copies: gradient-checked with small forced blocks, and
compared with the unblocked layer; plus the CPU row-copy kernel behind ``permute_axes``."""
import numpy as np
import pytest
from harness import build, gradient_check, make_backend

from neonlite.initializers import Gaussian
from neonlite.layers import MultiHeadAttention
from neonlite.layers.attention import _causal_blocks


def _force_blocks(rows):
    def hook(net):
        attn = net.layers[0]
        attn._blocks, attn._key_blocks = _causal_blocks(attn.Tq, attn.Tk, attn.causal, rows)
        assert len(attn._blocks) > 1
    return hook


def test_causal_blocks_cover_the_visible_triangle_once():
    blocks, key_blocks = _causal_blocks(10, 10, True, rows=3)
    seen, seen_t = np.zeros((10, 10), int), np.zeros((10, 10), int)
    for rows, keys in blocks:
        seen[rows, keys] += 1
    for keys, rows in key_blocks:
        seen_t[rows, keys] += 1
    visible = np.tril(np.ones((10, 10), int))
    assert ((seen == 1) | (visible == 0)).all() and (seen[visible == 1] == 1).all()
    assert ((seen_t == 1) | (visible == 0)).all() and (seen_t[visible == 1] == 1).all()
    assert seen.sum() < 100 and seen_t.sum() < 100
    assert _causal_blocks(10, 10, False, rows=3) == _causal_blocks(10, 4, True, rows=3)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_blocked_causal_attention_gradients(dropout):
    def make():
        layer = MultiHeadAttention(6, 2, causal=True, dropout=dropout, init=Gaussian(scale=0.5))
        layer.fixed_mask = True
        return layer
    gradient_check(make, (7, 6), batch=2, before_check=_force_blocks(3))


def test_blocked_equals_unblocked_on_a_long_sequence():
    be = make_backend("cpu", batch_size=2, dtype=np.float64)
    rng = np.random.default_rng(0)
    x = be.array(rng.normal(size=(2, 130, 8)))
    err = be.array(rng.normal(size=(2, 130, 8)))
    results = []
    for rows in (None, 64, 20):
        net = build(MultiHeadAttention(8, 2, causal=True), (130, 8))
        attn = net.layers[0]
        if rows is None:
            attn._blocks, attn._key_blocks = _causal_blocks(130, 130, False)
        else:
            _force_blocks(rows)(net)
        params = np.random.default_rng(1)  # the same parameters in every network
        for p in attn.parameters():
            p.value.set(params.normal(scale=0.3, size=p.value.shape))
        results.append((net.fprop(x).get(), net.bprop(err).get(),
                        [p.grad.get() for p in attn.parameters()]))
    for y, dx, grads in results[1:]:
        np.testing.assert_allclose(y, results[0][0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dx, results[0][1], rtol=1e-10, atol=1e-12)
        for g, g0 in zip(grads, results[0][2]):
            np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_permute_axes_between_strided_views(dtype):
    be = make_backend("cpu", dtype=dtype)
    if be.kernels.module("rows", np.dtype(dtype)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(1)
    proj = rng.normal(size=(3, 5, 12, 4)).astype(dtype)
    src = proj[:, :, 4:8]  # (3, 5, 4, 4), a strided view
    for axes in [(0, 2, 1, 3), (2, 0, 1, 3), (1, 2, 0, 3)]:
        out = np.full(tuple(src.shape[a] for a in axes), np.nan, dtype)
        assert be.kernels.permute_axes(src, out, axes)
        np.testing.assert_array_equal(out, np.transpose(src, axes))
        back = np.zeros_like(proj)
        inverse = tuple(np.argsort(axes))
        assert be.kernels.permute_axes(out, back[:, :, 4:8], inverse)
        np.testing.assert_array_equal(back[:, :, 4:8], src)
        assert not back[:, :, :4].any() and not back[:, :, 8:].any()
    assert not be.kernels.permute_axes(src, np.empty((3, 4, 4, 5), dtype), (0, 2, 3, 1))
    t = be.array(src)
    out = be.zeros((3, 5, 4, 4))
    be.permute_axes(t, out, (0, 1, 3, 2))  # the last axis moves: numpy's path
    np.testing.assert_array_equal(out.get(), np.transpose(src, (0, 1, 3, 2)))
