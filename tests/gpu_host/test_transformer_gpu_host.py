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
from neonlite.layers import BlockSparseAttention, MultiHeadAttention, TransformerBlock

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


def _fused_kernels(be):
    return {name.rsplit("_", 1)[0] for name in be.device.launches if name.startswith("nl_fa_")}


@pytest.mark.parametrize("widths, shape", [((160, 144), "t16d128"), ((16, 24), "t32d64")])
def test_attention_dropout_runs_on_the_device_and_matches_the_cpu(monkeypatch, restore_backend,
                                                                  widths, shape):
    """Dropout on the probabilities (the per-example Philox stream, regenerated in the
    backward pass) at heads of 80 / 72 (the 16-token tile kernels) and of 8 / 12: the GPU
    kernels draw the CPU's keep decisions; no host fallback exists any more."""
    rng = np.random.default_rng(4)
    x, err = rng.normal(size=(2, 9, 8)), rng.normal(size=(2, 9, 8))
    dk, dv = widths
    results, gpu = [], host_gpu_backend(monkeypatch, batch_size=2)
    for be in (gpu, neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)):
        results.append(_run(be, lambda: MultiHeadAttention(8, 2, causal=True, dropout=0.4, dk=dk,
                                                           dv=dv, name="attn"), (9, 8), x, err))
    _compare(results[0], results[1])
    assert _fused_kernels(gpu) == {f"nl_fa_{op}_{shape}" for op in ("fprop", "bprop_kv",
                                                                      "bprop_q")}


def test_block_sparse_attention_of_8_token_blocks_runs_on_the_device(monkeypatch,
                                                                     restore_backend):
    """8-token blocks (finer than the kernels' tiles) are masked inside each tile."""
    rng = np.random.default_rng(5)
    x, err = rng.normal(size=(2, 32, 8)), rng.normal(size=(2, 32, 8))
    layout = np.tril(rng.random((4, 4)) > 0.3) | np.eye(4, dtype=bool)
    results, gpu = [], host_gpu_backend(monkeypatch, batch_size=2)
    for be in (gpu, neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)):
        results.append(_run(be, lambda: BlockSparseAttention(2, layout, 8, causal=True,
                                                             d_model=8), (32, 8), x, err))
    _compare(results[0], results[1])
    assert _fused_kernels(gpu) == {f"nl_fa_{op}_t32d64" for op in ("fprop", "bprop_kv",
                                                                     "bprop_q")}


def test_attention_wider_than_the_kernels_names_the_op(monkeypatch, restore_backend):
    be = host_gpu_backend(monkeypatch, batch_size=1)
    q = be.zeros((1, 4, 136))
    with pytest.raises(ValueError, match=r"attention \(GPU backend\): head width 136 .* "
                                         r"wider than 128"):
        be.attention(q, q, q, be.zeros((1, 4, 136)), be.zeros((1, 4)), 0.1)


def test_a_head_wider_than_the_gpu_kernels_is_a_configure_error(monkeypatch, restore_backend):
    host_gpu_backend(monkeypatch, batch_size=1)
    with pytest.raises(ValueError, match=r"layer 'wide' \(MultiHeadAttention\): head width 136 "
                                         r".* wider than 128"):
        build(MultiHeadAttention(8, 1, dk=136, name="wide"), (4, 8))


def test_a_key_mask_of_another_storage_is_cast_on_the_device(monkeypatch, restore_backend):
    """float16 operands with a float32, non-contiguous key mask: the mask is cast into a
    device buffer (no host copy) and the result is the reference's."""
    from neonlite.backends.reference import attention as numpy_attention
    be = host_gpu_backend(monkeypatch, batch_size=2, dtype=np.float16)
    rng = np.random.default_rng(6)
    q, k, v = (rng.normal(size=s).astype(np.float16) for s in ((2, 5, 8), (2, 7, 8), (2, 7, 8)))
    mask = np.ones((2, 14), np.float32)
    mask[:, 2:14:2] = rng.random((2, 6)) > 0.4
    want_o, want_l = np.zeros((2, 5, 8)), np.zeros((2, 5))
    numpy_attention.attention(*(a.astype(np.float64) for a in (q, k, v)), want_o, want_l, 0.4,
                              False, mask[:, ::2], None, None, 1)
    out, lse = be.zeros((2, 5, 8)), be.zeros((2, 5), dtype=np.float32)
    device_mask = be.array(mask, dtype=np.float32)[:, ::2]
    assert device_mask.storage == "f32" and not device_mask.is_contiguous
    be.attention(be.array(q), be.array(k), be.array(v), out, lse, 0.4, key_mask=device_mask)
    np.testing.assert_allclose(out.get().astype(np.float64), want_o, atol=2e-2)
    np.testing.assert_allclose(lse.get(), want_l, atol=2e-2)
    assert "nl_fa_fprop_t32d64_f16" in be.device.launches
