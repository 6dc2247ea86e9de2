"""Block-sparse layouts, lookup tables and backend ops: every available backend (through the
all-backend harness) against the dense computation masked by the layout."""
import numpy as np
import pytest
from support.harness import compare_with_cpu

import neonlite
from neonlite.blocksparse import compile_layout, layouts
from neonlite.backends.reference import blocksparse as ref
from neonlite.backends.shared.blocksparse_dense import blocks_to_dense


# ---- layouts and tables -------------------------------------------------------------------------
def test_generators():
    assert layouts.banded((4, 4), 2).tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1],
                                                  [0, 0, 1, 1]]
    assert layouts.block_diagonal((4, 4), 2).sum() == 8
    causal_local = layouts.local((4, 4), 2, causal=True)
    assert causal_local.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    strided = layouts.strided((6, 6), 2, causal=True)
    assert strided[5].tolist() == [0, 1, 0, 1, 0, 1]
    fixed = layouts.fixed((4, 4), 2, causal=True)
    assert fixed.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]]
    rnd = layouts.random((3, 10, 10), 0.3, seed=1)
    assert rnd.shape == (3, 10, 10) and (rnd.sum(axis=(1, 2)) == 30).all()
    assert not (rnd[0] == rnd[1]).all(), "each head draws its own blocks"
    assert (layouts.random((3, 10, 10), 0.3, seed=1) == rnd).all()


def test_causal_with_fewer_query_blocks():
    """Queries are the last nq of nk blocks: query block i sees key blocks j <= i + nk - nq."""
    assert layouts.causal(np.ones((2, 4))).tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert layouts.local((2, 4), 1, causal=True).tolist() == [[0, 0, 1, 0], [0, 0, 0, 1]]


def test_from_spec_unions_patterns():
    spec = {"local": {"window": 2, "causal": True}, "strided": {"stride": 3, "causal": True}}
    got = layouts.from_spec(spec, (6, 6))
    want = layouts.local((6, 6), 2, causal=True) | layouts.strided((6, 6), 3, causal=True)
    assert (got == want).all()
    assert (layouts.from_spec({"banded": 2}, (4, 4)) == layouts.banded((4, 4), 2)).all()
    with pytest.raises(ValueError, match="window must be a positive int"):
        layouts.from_spec({"local": {"window": 0}}, (4, 4))
    with pytest.raises(ValueError, match="density must be in"):
        layouts.random((4, 4), 1.5)


def test_tables_entry_by_entry_and_memoized():
    layout = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 0]], dtype=np.uint8)
    t = compile_layout(layout)
    assert t.nnz == 4 and (t.row.tolist(), t.col.tolist()) == ([0, 0, 2, 2], [0, 2, 0, 1])
    assert t.row_ptr.tolist() == [0, 2, 2, 4] and t.row_other.tolist() == [0, 2, 0, 1]
    assert t.col_ptr.tolist() == [0, 2, 3, 4]
    assert t.col_k.tolist() == [0, 2, 3, 1] and t.col_other.tolist() == [0, 2, 2, 0]
    assert t.row_count.tolist() == [2, 0, 2] and t.col_count.tolist() == [2, 1, 1]
    assert compile_layout(layout.copy()) is t, "identical layouts share their tables"
    assert compile_layout(layout.astype(bool)) is t
    assert compile_layout(np.eye(3)) is not t
    with pytest.raises(ValueError):
        t.row_ptr[0] = 5


# ---- backend ops vs the dense computation masked by the layout ------------------------------
def _dense_sparse(t, s, bs):
    """(N, nnz, bs, bs) sparse blocks -> (N, H, R*bs, C*bs) dense with zeros elsewhere."""
    return np.stack([blocks_to_dense(t, np.moveaxis(s, 0, -1), bs).reshape(
        t.heads, t.rows * bs, t.cols * bs, -1)[..., n] for n in range(s.shape[0])])


@pytest.mark.parametrize("bs,M", [(8, 37), (16, 37), (32, 37), (64, 37), (16, 600)])
def test_weight_ops_match_masked_dense(bs, M):
    """M = 600 takes the kernels through several row chunks and a partial tile."""
    rng = np.random.default_rng(bs)
    layout = layouts.random((3, 4), 0.5, seed=bs)
    layout[0], layout[1], layout[:, 2] = 1, 0, 0
    t = compile_layout(layout)
    x, e = rng.normal(size=(M, 3 * bs)), rng.normal(size=(M, 4 * bs))
    w = rng.normal(size=(t.nnz, bs, bs))
    W = blocks_to_dense(t, w, bs)
    mask = ref.dense_mask(layout, bs)
    assert (W[mask == 0] == 0).all()

    def ops(be, x_t, e_t, w_t):
        plan = be.blocksparse_layer(layout, bs)
        y, dx, dw = be.empty((M, 4 * bs)), be.ones((M, 3 * bs)), be.ones(w_t.shape)
        be.blocksparse_fprop(plan, x_t, w_t, y)
        be.blocksparse_bprop(plan, e_t, w_t, dx, beta=1.0)
        be.blocksparse_update(plan, x_t, e_t, dw, beta=0.5)
        return y, dx, dw
    y, dx, dw = compare_with_cpu(ops, x, e, w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y, x @ W, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dx, e @ W.T + 1, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(blocks_to_dense(t, dw, bs),
                               mask * (x.T @ e) + 0.5 * mask, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("bs", (8, 16, 32, 64))
@pytest.mark.parametrize("causal", (False, True))
def test_attention_ops_match_masked_dense(bs, causal):
    rng = np.random.default_rng(bs + 10)
    N, H, nq, nk, d = 2, 2, 2, 3, 16
    layout = layouts.random((H, nq, nk), 0.6, seed=bs)
    layout[0, 0], layout[1, 1] = 0, 1
    t = compile_layout(layout)
    q, k = rng.normal(size=(N, H, nq * bs, d)), rng.normal(size=(N, H, nk * bs, d))
    dp = rng.normal(size=(N, t.nnz, bs, bs))
    scale = 0.3

    def ops(be, q_t, k_t, dp_t):
        plan = be.blocksparse_layer(layout, bs)
        s, p, ds = (be.empty((N, t.nnz, bs, bs)) for _ in range(3))
        o, o_t = be.empty((N, H, nq * bs, d)), be.empty((N, H, nk * bs, d))
        be.blocksparse_sdd(plan, q_t, k_t, s, alpha=scale)
        be.blocksparse_softmax(plan, s, p, 1.0, causal)
        be.blocksparse_softmax_bprop(plan, p, dp_t, ds, 2.0)
        be.blocksparse_dsd(plan, p, k_t, o)
        be.blocksparse_dsd(plan, p, q_t, o_t, transposed=True)
        return s, p, ds, o, o_t
    s, p, ds, o, o_t = compare_with_cpu(ops, q, k, dp, rtol=1e-4, atol=1e-5)
    mask = ref.dense_mask(layout, bs).astype(bool)
    if causal:
        qpos = np.arange(nq * bs).reshape(-1, 1) + (nk - nq) * bs
        mask = mask & (np.arange(nk * bs).reshape(1, -1) <= qpos)
    logits = scale * q @ np.swapaxes(k, -1, -2)
    np.testing.assert_allclose(_dense_sparse(t, s, bs), logits * ref.dense_mask(layout, bs),
                               rtol=1e-4, atol=1e-4)
    masked = np.where(mask, logits, -np.inf)
    top = np.max(masked, axis=-1, keepdims=True)
    ex = np.where(mask, np.exp(masked - np.where(np.isfinite(top), top, 0)), 0)
    total = ex.sum(axis=-1, keepdims=True)
    P = np.divide(ex, total, out=np.zeros_like(ex), where=total > 0)
    np.testing.assert_allclose(_dense_sparse(t, p, bs), P, rtol=1e-4, atol=1e-5)
    assert not P[:, 0, :bs].any(), "a row without blocks gives zeros"
    dP = _dense_sparse(t, dp, bs)
    dS = 2.0 * P * (dP - np.sum(dP * P, axis=-1, keepdims=True))
    np.testing.assert_allclose(_dense_sparse(t, ds, bs), dS, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(o, P @ k, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(o_t, np.swapaxes(P, -1, -2) @ q, rtol=1e-4, atol=1e-4)


def test_float16_runs_the_reference():
    """A dtype the C kernels do not take falls back to the numpy reference walk."""
    be = neonlite.gen_backend("cpu", batch_size=2, datatype=np.float16, numpy_float16=True)
    layout = layouts.banded((2, 2), 1)
    plan = be.blocksparse_layer(layout, 8)
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(5, 16)), rng.normal(size=(2, 8, 8))
    y = be.empty((5, 16))
    be.blocksparse_fprop(plan, be.array(x), be.array(w), y)
    W = blocks_to_dense(plan.tables, w, 8)
    np.testing.assert_allclose(y.get(), x @ W, rtol=2e-2, atol=5e-2)
