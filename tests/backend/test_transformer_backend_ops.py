"""Backend ops added for transformers: masked softmax (+ bprop), row gather / scatter-add,
axis permutation; checked against plain numpy on every available backend."""
import numpy as np
import pytest
from support.harness import compare_with_cpu, make_backend


def reference_masked_softmax(x, scale, causal, key_mask):
    B, Tq, Tk = x.shape
    s = scale * x.astype(np.float64)
    hide = np.zeros((B, Tq, Tk), dtype=bool)
    if causal:
        hide |= np.arange(Tk)[None, :] > np.arange(Tq)[:, None] + (Tk - Tq)
    if key_mask is not None:
        n = key_mask.shape[0]
        hide |= np.repeat(key_mask == 0, B // n, axis=0)[:, None, :]
    s = np.where(hide, -np.inf, s)
    peak = s.max(-1, keepdims=True)
    peak[np.isneginf(peak)] = 0
    e = np.exp(s - peak)
    total = e.sum(-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("tq,tk", [(5, 5), (2, 6)])
def test_masked_softmax_matches_reference(causal, with_mask, tq, tk):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, tq, tk)) * 3
    mask = None
    if with_mask:
        mask = (rng.random((2, tk)) > 0.3).astype(np.float32)
        mask[1] = 0  # every key of example 1 hidden: its rows must be all zeros
    want = reference_masked_softmax(x, 0.7, causal, mask)

    def op(be, xt, *m):
        out = be.empty(xt.shape)
        be.masked_softmax(xt, out, 0.7, causal, m[0] if m else None)
        return out

    got = compare_with_cpu(op, x, *([mask] if with_mask else []))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if with_mask:
        assert not got[3:].any()


def test_masked_softmax_in_place_and_bprop():
    rng = np.random.default_rng(1)
    x, dy = rng.normal(size=(4, 3, 5)), rng.normal(size=(4, 3, 5))
    y = reference_masked_softmax(x, 0.5, True, None)
    want = 0.5 * y * (dy - (dy * y).sum(-1, keepdims=True))

    def op(be, xt, dyt):
        be.masked_softmax(xt, xt, 0.5, True)
        be.masked_softmax_bprop(xt, dyt, dyt, 0.5)
        return xt, dyt

    got_y, got_dx = compare_with_cpu(op, x, dy)
    np.testing.assert_allclose(got_y, y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx, want, rtol=1e-4, atol=1e-6)


def test_take_and_scatter_add_rows():
    rng = np.random.default_rng(2)
    table = rng.normal(size=(7, 3))
    ids = rng.integers(0, 7, size=(4, 9))
    rows = rng.normal(size=(4, 9, 3))
    want_grad = np.zeros((7, 3))
    np.add.at(want_grad, ids.reshape(-1), rows.reshape(-1, 3))

    def op(be, tt, it, rt):
        out = be.empty((4, 9, 3))
        be.take_rows(tt, it, out)
        grad = be.zeros((7, 3))
        be.scatter_add_rows(grad, it, rt)
        return out, grad

    got, grad = compare_with_cpu(op, table, ids.astype(np.int32), rows)
    np.testing.assert_allclose(got, table[ids].astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


def test_scatter_add_is_deterministic_and_accepts_float_ids():
    be = make_backend("cpu", dtype=np.float32)
    rng = np.random.default_rng(3)
    ids = be.array(rng.integers(0, 3, size=500).astype(np.float32))
    rows = be.array(rng.normal(size=(500, 4)) * 1e3)
    results = []
    for _ in range(3):
        grad = be.zeros((3, 4))
        be.scatter_add_rows(grad, ids, rows)
        results.append(grad.get())
    assert all(np.array_equal(results[0], r) for r in results[1:])


@pytest.mark.parametrize("bad", [7, -1, 2.5])
def test_take_rows_rejects_bad_ids(bad):
    be = make_backend("cpu", dtype=np.float32)
    ids = np.array([[0, 1], [2, 3]], dtype=np.float32)
    ids[1, 0] = bad
    with pytest.raises(IndexError, match=r"position \(1, 0\).*\[0, 7\)"):
        be.take_rows(be.zeros((7, 2)), be.array(ids), be.empty((2, 2, 2)))


def test_permute_axes():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)

    def op(be, xt):
        out = be.empty((2, 4, 3, 5))
        be.permute_axes(xt, out, (0, 2, 1, 3))
        return out

    np.testing.assert_array_equal(compare_with_cpu(op, x), x.transpose(0, 2, 1, 3))
