"""Batch norm (with the fused ReLU), layer norm and softmax-cross-entropy kernels
(``kernels/cuda/norm.cu``, ``softmax.cu``) on the host emulator against numpy in float64,
launched with the grids the GPU backend uses (``backends/gpu_norm.py``).  Float32 storage is
checked to 1e-5; float16 softmax-cross-entropy on logits whose exp would overflow float16 (and
float32) checks that the log-sum-exp stays finite, and the gradient scale of a mean and of a
summed loss."""
import numpy as np
import pytest
from support.cuda_host_emulator import HostModule
from support.requires import requires

from neonlite.backends.gpu import norm as gpu_norm
from neonlite.kernels import specs

pytestmark = requires("emulator")

CUDA = specs.find("pool").root / "cuda"
F32 = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def norm():
    header = (CUDA / "neonlite_common.cuh").read_text()
    spec = specs.find("norm")
    nargs = {"nl_colsum2": 8, "nl_bn_stats": 11, "nl_bn_apply": 10, "nl_colsum_finish": 6,
             "nl_bn_bprop": 10, "nl_ln_fprop": 9, "nl_ln_bprop": 7, "nl_rms_fprop": 10,
             "nl_rms_bprop": 9, "nl_rms_dgamma": 9}
    kernels = {f: nargs[f.rsplit("_", 1)[0]] for f in spec.functions}
    return HostModule([spec.source_path.read_text()], kernels, prelude=header)


@pytest.fixture(scope="module")
def softmax():
    header = (CUDA / "neonlite_common.cuh").read_text()
    spec = specs.find("softmax")
    kernels = {f: 8 for f in spec.functions if f.startswith("nl_softmax_xent")}
    return HostModule([spec.source_path.read_text()], kernels, prelude=header)


def _colsum(norm, u, v, w, mode, splits_hint=None):
    M, C = u.shape
    plan = gpu_norm.column_plan(M, C, max_splits=splits_hint or 3)
    partial = np.zeros(plan.splits * C * 2, np.float32)
    norm.launch("nl_colsum2_f32", plan.grid, plan.block,
                [u, v if v is not None else 0, w if w is not None else 0, partial, mode, M, C,
                 plan.rows_per_split])
    return plan, partial


@pytest.mark.parametrize("relu", [0, 1])
@pytest.mark.parametrize("M,C", [(50, 7), (300, 40), (1, 3)])
def test_batchnorm_training_fprop_and_bprop(norm, M, C, relu):
    rng = np.random.default_rng(M + C)
    x = (rng.normal(size=(M, C)) * 3 + 100).astype(np.float32)
    gamma, beta = rng.normal(size=C).astype(np.float32), rng.normal(size=C).astype(np.float32)
    rm, rv = np.zeros(C, np.float32), np.ones(C, np.float32)
    mean, invstd = np.zeros(C, np.float32), np.zeros(C, np.float32)
    plan, partial = _colsum(norm, x, None, None, 0)
    norm.launch("nl_bn_stats_f32", (1,), (64,), [partial, x, mean, invstd, rm, rv, M, C,
                                                 plan.splits, 1e-5, 0.9])
    x64 = x.astype(np.float64)
    mu, var = x64.mean(0), x64.var(0)
    np.testing.assert_allclose(mean, mu, rtol=1e-6)
    np.testing.assert_allclose(invstd, 1 / np.sqrt(var + 1e-5), rtol=2e-4)
    np.testing.assert_allclose(rm, 0.1 * mu, rtol=1e-5)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * var * M / max(M - 1, 1), rtol=2e-4)
    xhat, y = np.zeros_like(x), np.zeros_like(x)
    norm.launch("nl_bn_apply_f32", (3,), (64,), [x, mean, invstd, gamma, beta, xhat, y, M, C,
                                                 relu])
    h = (x64 - mean) * invstd
    want_y = gamma * h + beta
    want_y = np.maximum(want_y, 0) if relu else want_y
    np.testing.assert_allclose(xhat, h, **F32)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-4)
    dy = rng.normal(size=(M, C)).astype(np.float32)
    dgamma, dbeta = np.full(C, 0.5, np.float32), np.full(C, -1.0, np.float32)
    plan, partial = _colsum(norm, dy, xhat, y if relu else None, 1)
    sums = np.zeros(2 * C, np.float32)
    norm.launch("nl_colsum_finish_f32", (1,), (64,), [partial, sums, dbeta, dgamma, C,
                                                      plan.splits])
    dx = np.ones_like(x)
    norm.launch("nl_bn_bprop_f32", (3,), (64,), [dy, y if relu else 0, xhat, invstd, gamma, sums,
                                                 dx, M, C, 0.5])
    g = dy * (y > 0) if relu else dy.astype(np.float64)
    db, dg = g.sum(0), (g * xhat).sum(0)
    np.testing.assert_allclose(dbeta, db - 1.0, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dgamma, dg + 0.5, rtol=1e-5, atol=1e-4)
    want_dx = gamma * invstd / M * (M * g - db - xhat * dg) + 0.5
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M,D", [(5, 7), (3, 1000), (1, 1)])
def test_layernorm_fprop_and_bprop(norm, M, D):
    rng = np.random.default_rng(D)
    x = (rng.normal(size=(M, D)) + 5).astype(np.float32)
    gamma, beta = rng.normal(size=D).astype(np.float32), rng.normal(size=D).astype(np.float32)
    y, xhat, invstd = np.zeros_like(x), np.zeros_like(x), np.zeros((M, 1), np.float32)
    grid = gpu_norm.row_grid(M, 4)
    norm.launch("nl_ln_fprop_f32", grid, (256,), [x, gamma, beta, y, xhat, invstd, M, D, 1e-5])
    x64 = x.astype(np.float64)
    inv = 1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    h = (x64 - x64.mean(-1, keepdims=True)) * inv
    np.testing.assert_allclose(invstd, inv, rtol=1e-4)
    np.testing.assert_allclose(xhat, h, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y, gamma * h + beta, rtol=1e-4, atol=1e-4)
    dy = rng.normal(size=(M, D)).astype(np.float32)
    dx = np.zeros_like(x)
    norm.launch("nl_ln_bprop_f32", grid, (256,), [dy, xhat, invstd, gamma, dx, M, D])
    g = dy * gamma
    want = invstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-4)


def _xent_reference(x, t):
    x = x.astype(np.float64)
    lse = x.max(-1, keepdims=True)
    lse = lse + np.log(np.exp(x - lse).sum(-1, keepdims=True))
    p = np.exp(x - lse)
    return p, -(t * (x - lse)).sum()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("M,K", [(3, 5), (4, 3001)])
def test_softmax_cross_entropy_float32(softmax, M, K, reduction):
    rng = np.random.default_rng(K)
    x = (rng.normal(size=(M, K)) * 4).astype(np.float32)
    t = np.eye(K, dtype=np.float32)[rng.integers(0, K, M)]
    t[0] = 0.5 * t[0] + 0.5 / K
    probs, grad, rows = np.zeros_like(x), np.zeros_like(x), np.zeros(M, np.float32)
    scale = 1.0 / M if reduction == "mean" else 1.0
    softmax.launch("nl_softmax_xent_f32", gpu_norm.row_grid(M, 3), (256,),
                   [x, t, probs, grad, rows, M, K, scale])
    p, loss = _xent_reference(x, t)
    np.testing.assert_allclose(probs, p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad, scale * (p - t), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rows.sum(), loss, rtol=1e-5)


def test_softmax_cross_entropy_float16_never_overflows(softmax):
    """Logits up to 60000 (float16's range; exp overflows float16 past 11 and float32 past 88):
    probabilities, gradients and the loss stay finite and right."""
    M, K = 3, 700
    rng = np.random.default_rng(1)
    x = (rng.uniform(-60000, 60000, size=(M, K))).astype(np.float16)
    x[1, :] = np.float16(-30000)
    x[1, 5] = np.float16(-29990)
    ids = np.array([int(np.argmax(x[0])), 5, 3])
    t = np.eye(K, dtype=np.float16)[ids]
    probs, grad, rows = np.zeros_like(x), x.copy(), np.zeros(M, np.float32)
    softmax.launch("nl_softmax_xent_f16", (2,), (256,), [x, t, probs, grad, rows, M, K, 1.0 / M])
    p, _ = _xent_reference(x, t)
    assert np.isfinite(probs).all() and np.isfinite(grad).all() and np.isfinite(rows).all()
    np.testing.assert_allclose(probs.astype(np.float64), p, atol=1e-3)
    np.testing.assert_allclose(grad.astype(np.float64), (p - t) / M, atol=1e-3)
    x64 = x.astype(np.float64)
    lse = x64.max(-1) + np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1))
    np.testing.assert_allclose(rows, lse - x64[np.arange(M), ids], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("M,K", [(3, 5), (4, 3001)])
def test_softmax_cross_entropy_class_indices_equal_one_hot(softmax, M, K):
    """nl_softmax_xent_index with int32 class indices gives the one-hot kernel's values; a bad
    index makes its row's loss NaN (the backend then names it)."""
    rng = np.random.default_rng(K + 1)
    x = (rng.normal(size=(M, K)) * 4).astype(np.float32)
    idx = rng.integers(0, K, M).astype(np.int32)
    t = np.eye(K, dtype=np.float32)[idx]
    outs = []
    for name, targets in (("nl_softmax_xent_f32", t), ("nl_softmax_xent_index_f32", idx)):
        probs, grad, rows = np.zeros_like(x), np.zeros_like(x), np.zeros(M, np.float32)
        softmax.launch(name, gpu_norm.row_grid(M, 3), (256,),
                       [x, targets, probs, grad, rows, M, K, 1.0 / M])
        outs.append((probs, grad, rows))
    for one_hot, index in zip(*outs):
        np.testing.assert_array_equal(index, one_hot)
    idx[1] = K
    rows = np.zeros(M, np.float32)
    softmax.launch("nl_softmax_xent_index_f32", gpu_norm.row_grid(M, 3), (256,),
                   [x, idx, np.zeros_like(x), np.zeros_like(x), rows, M, K, 1.0 / M])
    assert np.isnan(rows[1]) and np.isfinite(rows[[0, 2]]).all()
