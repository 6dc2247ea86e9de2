"""The fused attention op (``Backend.attention`` / ``attention_bprop``): every mask combination
against the numpy reference on every backend, against the unfused computation the layers ran
before (dropout masks bit for bit), against PyTorch's scaled_dot_product_attention in float64,
finite differences, thread-count independence, memory linear in T, and bad input."""
import os
import tracemalloc

from support import attention_unfused
import numpy as np
import pytest
from support.harness import available_backends, make_backend

import neonlite
from neonlite.backends.reference import attention as numpy_attention
from neonlite.backends.cpu.threads import set_cpu_threads
from neonlite.backends.shared.attention_tables import AttentionBlocks, AttentionDropout

# (N, H, Tq, Tk, dk, dv, causal, key mask, dropout, blocks)
CASES = {
    "self": (2, 2, 70, 70, 16, 16, False, False, False, False),
    "causal": (2, 2, 70, 70, 16, 16, True, False, False, False),
    "padding": (2, 2, 33, 33, 8, 8, False, True, False, False),
    "causal+padding": (2, 3, 65, 65, 8, 8, True, True, False, False),
    "cross": (2, 2, 20, 75, 12, 12, False, True, False, False),
    "decode": (2, 2, 1, 75, 12, 12, True, False, False, False),
    "cross causal": (1, 2, 40, 130, 16, 16, True, True, False, False),
    "dk!=dv": (2, 2, 30, 40, 8, 20, True, False, False, False),
    "dropout": (2, 2, 30, 40, 8, 12, True, True, True, False),
    "blocks": (2, 2, 64, 96, 8, 8, True, False, False, True),
    "blocks+all": (2, 2, 48, 48, 8, 8, True, True, True, True),
    # longer than the kernels' 256-row in-place limit: strided operands go through their
    # per-thread contiguous copies, the backward's dK, dV and dQ through contiguous sums
    "long": (1, 2, 300, 300, 16, 16, False, False, False, False),
    "long causal+padding+dropout": (1, 2, 290, 300, 16, 8, True, True, True, False),
    # slices whose shared rows pass the kernels' 1 MiB grouping limit in float32 and float64:
    # blocks of a slice go in groups (forward: query blocks sharing k and v; backward: key
    # blocks sharing q, dout and dq), whose visits merge in order
    "grouped": (1, 2, 2200, 2200, 64, 64, True, True, False, False),
    "grouped blocks": (1, 2, 2200, 2200, 64, 64, True, True, False, True),
    "grouped queries+dropout": (1, 2, 130, 2200, 64, 64, False, True, True, False),
    "grouped keys+dropout": (1, 2, 2200, 130, 64, 64, False, True, True, False),
}


def _inputs(case, seed=0):
    N, H, Tq, Tk, dk, dv, causal, padded, drop, blocked = CASES[case]
    rng = np.random.default_rng(seed)
    B = N * H
    arrays = [rng.normal(size=s) for s in ((B, Tq, dk), (B, Tk, dk), (B, Tk, dv), (B, Tq, dv))]
    mask = None
    if padded:
        mask = (rng.random((N, Tk)) > 0.3).astype(np.float64)
        if N > 1:  # an example with no visible key: its rows are 0 (the others' are not)
            mask[0, :] = 0
    kw = dict(causal=causal, dropout=AttentionDropout(0.7, 1234, 5, 99, 3) if drop else None,
              blocks=AttentionBlocks(rng.random((H, -(-Tq // 16), -(-Tk // 16))) > 0.4, 16, 16)
              if blocked else None, heads=H)
    return arrays, mask, kw


def _run(be, arrays, mask, kw, scale=0.3):
    q, k, v, dout = (be.array(a) for a in arrays)
    B, Tq, dv = dout.shape
    out, lse = be.zeros((B, Tq, dv)), be.zeros((B, Tq))
    grads = [be.zeros(t.shape) for t in (q, k, v)]
    m = None if mask is None else be.array(mask)
    be.attention(q, k, v, out, lse, scale, key_mask=m, **kw)
    be.attention_bprop(q, k, v, out, lse, dout, *grads, scale, key_mask=m, **kw)
    return [out.get(), lse.get()] + [g.get() for g in grads]


def _reference(arrays, mask, kw, scale=0.3):
    q, k, v, dout = arrays
    out, lse = np.zeros(dout.shape), np.zeros(dout.shape[:2])
    grads = [np.zeros(a.shape) for a in (q, k, v)]
    numpy_attention.attention(q, k, v, out, lse, scale, kw["causal"], mask, kw["dropout"],
                              kw["blocks"], kw["heads"])
    numpy_attention.attention_bprop(q, k, v, out, lse, dout, *grads, scale, kw["causal"], mask,
                                    kw["dropout"], kw["blocks"], kw["heads"])
    return [out, lse] + grads


def _close(got, want, tol, names=("out", "lse", "dq", "dk", "dv")):
    for name, g, w in zip(names, got, want):
        finite = np.isfinite(w)
        assert (np.isfinite(g) == finite).all(), f"{name}: -inf rows differ"
        np.testing.assert_allclose(g[finite], w[finite], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_the_reference_on_every_backend(case, dtype):
    arrays, mask, kw = _inputs(case)
    want = _reference(arrays, mask, kw)
    for name in available_backends():
        be = make_backend(name, batch_size=arrays[0].shape[0] // kw["heads"], dtype=dtype)
        _close(_run(be, arrays, mask, kw), want, 1e-12 if dtype == np.float64 else 2e-5)


def _token_major(be, head_major, heads, fill):
    """A (N, T, heads, d) view (slice b = n*heads + h at [n, :, h]) of a wider (N, T,
    (heads + 1) * d) buffer, as a layer's projection columns are; its first d columns hold
    ``fill``.  Returns (view, buffer)."""
    B, T, d = head_major.shape
    N = B // heads
    full = np.full((N, T, heads + 1, d), fill)
    full[:, :, 1:] = head_major.reshape(N, heads, T, d).transpose(0, 2, 1, 3)
    buf = be.array(full.reshape(N, T, (heads + 1) * d))
    return buf.reshape(N, T, heads + 1, d)[:, :, 1:], buf


def _head_major(view):
    N, T, H, d = view.shape
    return view.get().transpose(0, 2, 1, 3).reshape(N * H, T, d)


@pytest.mark.parametrize("case", ["self", "causal+padding", "cross causal", "dk!=dv", "dropout",
                                  "blocks+all", "decode", "long",
                                  "long causal+padding+dropout", "grouped",
                                  "grouped queries+dropout"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_token_major_operands_match_head_major(case, dtype):
    """Operands given as (N, T, H, d) views of wider buffers (no head permutes) give the
    head-major results on every backend, and nothing outside the views is written."""
    arrays, mask, kw = _inputs(case)
    H = kw["heads"]
    want = _reference(arrays, mask, kw)
    for name in available_backends():
        be = make_backend(name, batch_size=arrays[0].shape[0] // H, dtype=dtype)
        q, k, v, dout = (_token_major(be, a, H, 7.0)[0] for a in arrays)
        out, out_buf = _token_major(be, np.zeros(arrays[3].shape), H, -3.0)
        grads = [_token_major(be, np.zeros(a.shape), H, -3.0) for a in arrays[:3]]
        lse = be.zeros(arrays[0].shape[:2])
        m = None if mask is None else be.array(mask)
        be.attention(q, k, v, out, lse, 0.3, key_mask=m, **kw)
        be.attention_bprop(q, k, v, out, lse, dout, *(g for g, _ in grads), 0.3, key_mask=m,
                           **kw)
        got = [_head_major(out), lse.get()] + [_head_major(g) for g, _ in grads]
        _close(got, want, 1e-12 if dtype == np.float64 else 2e-5)
        for buf in [out_buf] + [b for _, b in grads]:
            N, T, width = buf.shape
            assert (buf.get().reshape(N, T, H + 1, -1)[:, :, 0] == -3.0).all(), name


@pytest.mark.parametrize("case", ["causal+padding", "dropout", "blocks+all", "cross causal"])
def test_matches_the_unfused_computation(case, monkeypatch):
    """Float64: the fused op against the score-array path the layers ran before (its
    dropout mask drawn whole from the example stream), so the masks agree bit for bit."""
    arrays, mask, kw = _inputs(case)
    be = make_backend("cpu", batch_size=arrays[0].shape[0] // kw["heads"], dtype=np.float64)
    fused = _run(be, arrays, mask, kw)
    attention_unfused.patch(monkeypatch, be)
    unfused = _run(be, arrays, mask, kw)
    rows = np.isfinite(fused[1])  # rows with no visible key: 0 in both
    np.testing.assert_allclose(fused[0], unfused[0], rtol=1e-12, atol=1e-12)
    assert not fused[0][~rows].any()
    _close(fused[2:], unfused[2:], 1e-11, ("dq", "dk", "dv"))


@pytest.mark.parametrize("case", ["causal", "padding", "cross causal", "dk!=dv", "decode"])
def test_matches_torch_sdpa_in_float64(case):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: no SDPA to compare")
    arrays, mask, kw = _inputs(case)
    N, H, Tq, Tk = CASES[case][:4]
    be = make_backend("cpu", batch_size=N, dtype=np.float64)
    ours = _run(be, arrays, mask, kw, scale=0.25)
    q, k, v = (torch.tensor(a.reshape(N, H, *a.shape[1:]), requires_grad=True)
               for a in arrays[:3])
    allowed = torch.ones(N, 1, Tq, Tk, dtype=torch.bool)
    if kw["causal"]:
        allowed &= torch.tensor(np.tri(Tq, Tk, Tk - Tq, dtype=bool))
    if mask is not None:
        allowed &= torch.tensor(mask[:, None, None, :] != 0)
    seen = allowed.any(-1, keepdim=True)  # SDPA gives NaN where a row sees nothing
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed | ~seen,
                                                         scale=0.25)
    o = o * seen
    o.backward(torch.tensor(arrays[3].reshape(o.shape)))
    theirs = [t.detach().numpy().reshape(a.shape) for t, a in
              zip((o, q.grad, k.grad, v.grad), (arrays[3], *arrays[:3]))]
    _close([ours[0]] + ours[2:], theirs, 1e-11, ("out", "dq", "dk", "dv"))


def test_finite_differences():
    """dq, dk, dv of the CPU op against central differences of a random functional of out,
    with causal cross-attention, a padding mask, dropout and a block layout together."""
    arrays, mask, kw = _inputs("blocks+all")
    arrays = [np.ascontiguousarray(a[:2, :20, :4]) for a in arrays]
    kw = dict(kw, heads=2, blocks=AttentionBlocks(np.array([[[1, 0], [1, 1]]]), 16, 16))
    mask = mask[:1, :20].copy()
    mask[0, :] = 1
    mask[0, 5] = 0
    be = make_backend("cpu", batch_size=1, dtype=np.float64)
    w = np.random.default_rng(9).normal(size=arrays[3].shape)
    got = _run(be, arrays[:3] + [w], mask, kw)

    def loss(xs):
        return float((_run(be, xs + [w], mask, kw)[0] * w).sum())

    for which, grad in zip(range(3), got[2:]):
        flat = arrays[which].reshape(-1)
        for idx in np.random.default_rng(which).choice(flat.size, 12, replace=False):
            orig = flat[idx]
            flat[idx] = orig + 1e-6
            plus = loss(arrays[:3])
            flat[idx] = orig - 1e-6
            minus = loss(arrays[:3])
            flat[idx] = orig
            numeric = (plus - minus) / 2e-6
            assert abs(grad.reshape(-1)[idx] - numeric) < 1e-6 * max(1, abs(numeric)), \
                f"input {which} element {idx}: {grad.reshape(-1)[idx]} vs {numeric}"


@pytest.mark.parametrize("case", ["causal+padding", "dropout", "blocks", "grouped",
                                  "grouped blocks", "grouped queries+dropout",
                                  "grouped keys+dropout"])
def test_results_do_not_depend_on_the_thread_count(case):
    arrays, mask, kw = _inputs(case)
    be = make_backend("cpu", batch_size=arrays[0].shape[0] // kw["heads"], dtype=np.float32)
    if be.kernels.module("flash_attention", np.dtype(np.float32)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    results = []
    try:
        for threads in (1, 2, 3):
            set_cpu_threads(threads)
            results.append(_run(be, arrays, mask, kw))
    finally:
        set_cpu_threads(len(os.sched_getaffinity(0)))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_memory_is_linear_in_T():
    """T=2048, one slice of width 64, float32: a (T, T) score array is 16 MiB.  Everything
    the fused op allocates in its first forward + backward (its per-thread tiles, its tables,
    the backward's partial dq sums: at most 7 x (T, 64)) must stay under 4 MiB; the unfused
    reference, measured the same way, passes 16 MiB, so the measure does see such a buffer."""
    T, d = 2048, 64
    be = make_backend("cpu", batch_size=1, dtype=np.float32)
    if be.kernels.module("flash_attention", np.dtype(np.float32)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(0)
    q, k, v, dout = (be.array(rng.normal(size=(1, T, d))) for _ in range(4))
    out, lse = be.zeros((1, T, d)), be.zeros((1, T))
    grads = [be.zeros((1, T, d)) for _ in range(3)]

    def fused():
        be.attention(q, k, v, out, lse, 0.125, True)
        be.attention_bprop(q, k, v, out, lse, dout, *grads, 0.125, True)

    def unfused():
        numpy_attention.attention(q._ary, k._ary, v._ary, out._ary, lse._ary, 0.125, True)

    peaks = {}
    for name, step in (("fused", fused), ("unfused", unfused)):
        tracemalloc.start()
        step()
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["fused"] < 4 << 20, f"fused attention allocated {peaks['fused']} bytes"
    assert peaks["unfused"] > T * T * 4


def test_bad_shapes_are_one_clear_error():
    be = neonlite.gen_backend("cpu", batch_size=2)
    q, k, v = be.zeros((4, 5, 8)), be.zeros((4, 7, 8)), be.zeros((4, 7, 6))
    out, lse = be.zeros((4, 5, 6)), be.zeros((4, 5))
    with pytest.raises(ValueError, match=r"key_mask has shape \(2, 5\), expected \(N, Tk\) = "
                                         r"\(2, 7\)"):
        be.attention(q, k, v, out, lse, 1.0, key_mask=be.ones((2, 5)), heads=2)
    with pytest.raises(ValueError, match=r"lse has shape \(4, 7\), expected \(4, 5\)"):
        be.attention(q, k, v, out, be.zeros((4, 7)), 1.0, heads=2)
    with pytest.raises(ValueError, match="4 slices are not a multiple of heads=3"):
        be.attention(q, k, v, out, lse, 1.0, heads=3)
    with pytest.raises(ValueError, match=r"block layout has shape \(1, 1, 1\)"):
        be.attention(q, k, v, out, lse, 1.0, blocks=AttentionBlocks(np.ones((1, 1)), 4, 4),
                     heads=2)


def test_key_groups_deal_every_block_once_and_balance_a_strided_layout():
    """The backward's key-block groups: each block of each table head in exactly one group,
    in increasing order; on a local + strided layout (every 4th column visited by all later
    rows) the heaviest group carries less than round-robin's (column c to group c % 4)."""
    from neonlite.backends.cpu.attention import key_groups, visit_tables
    nb = 32
    r, c = np.arange(nb)[:, None], np.arange(nb)[None, :]
    layout = np.stack([((r - c < 4) | (c % 4 == 3)) & (c <= r), np.tril(np.ones((nb, nb)))])
    _, _, col_ptr, _ = visit_tables(layout, nb * 16, nb * 16, 16, 16, True)
    counts = np.diff(col_ptr).reshape(2, nb)
    ptr, cols = key_groups(col_ptr, 2, nb, 4)
    assert ptr.dtype == cols.dtype == np.int32 and len(ptr) == 2 * 4 + 1
    for t in range(2):
        members = [cols[ptr[t * 4 + g]:ptr[t * 4 + g + 1]] for g in range(4)]
        assert sorted(np.concatenate(members).tolist()) == list(range(nb))
        assert all((np.diff(m) > 0).all() for m in members)
        heaviest = max(counts[t, m].sum() for m in members)
        round_robin = max(counts[t, g::4].sum() for g in range(4))
        assert heaviest <= round_robin
        if t == 0:
            assert heaviest < 0.8 * round_robin


def test_a_kept_call_follows_new_inputs_dropout_steps_masks_and_thread_counts():
    """The CPU backend keeps the prepared kernel call of a set of operands: calls on the same
    tensors with new values, another dropout step, another key mask or another OpenMP thread
    count (which sizes the work arrays) give what fresh tensors give."""
    arrays, mask, kw = _inputs("causal+padding")
    be = make_backend("cpu", batch_size=arrays[0].shape[0] // kw["heads"], dtype=np.float64)
    if be.kernels.module("flash_attention", np.dtype(np.float64)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    q, k, v, dout = (be.array(a) for a in arrays)
    out, lse = be.zeros(dout.shape), be.zeros(dout.shape[:2])
    grads = [be.zeros(t.shape) for t in (q, k, v)]

    def run(masked, dropout, scale=0.3):
        m = be.array(masked) if masked is not None else None
        be.attention(q, k, v, out, lse, scale, kw["causal"], m, dropout, None, kw["heads"])
        be.attention_bprop(q, k, v, out, lse, dout, *grads, scale, kw["causal"], m, dropout,
                           None, kw["heads"])
        return [out.get(), lse.get()] + [g.get() for g in grads]

    try:
        for threads in (1, 3, 2):
            set_cpu_threads(threads)
            for case in range(3):
                values = [a * (1 + case) for a in arrays]
                for t, a in zip((q, k, v, dout), values):
                    t.set(a)
                masked = None if case == 0 else mask
                dropout = AttentionDropout(0.7, 1234, case, 99, 3) if case == 2 else None
                fresh = dict(kw, dropout=dropout)
                got = run(masked, dropout)
                want = _run(be, values, masked, fresh)
                for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
                    np.testing.assert_array_equal(g, w, err_msg=f"{name}, {threads} threads")
    finally:
        set_cpu_threads(len(os.sched_getaffinity(0)))


def test_per_call_windows_are_not_kept_and_kept_views_are():
    """A decoder's growing key/value windows (slices made per call) leave no kept call behind;
    views a layer marks with ``be.keep`` at allocate get one, and the same results."""
    be = make_backend("cpu", batch_size=2, dtype=np.float64)
    if be.kernels.module("flash_attention", np.dtype(np.float64)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(11)
    B, T, d = 4, 12, 8
    q, out, lse = be.array(rng.normal(size=(B, 1, d))), be.zeros((B, 1, d)), be.zeros((B, 1))
    kc, vc = be.array(rng.normal(size=(B, T, d))), be.array(rng.normal(size=(B, T, d)))
    before = len(be._op_calls["attention"].__self__.kept)
    for L in range(1, T + 1):
        be.attention(q, kc[:, :L], vc[:, :L], out, lse, 0.5, True, None, None, None, 2)
    assert len(be._op_calls["attention"].__self__.kept) == before
    window = out.get()
    k_all, v_all = be.keep(kc[:, :T]), be.keep(vc[:, :T])
    for _ in range(2):
        be.attention(q, k_all, v_all, out, lse, 0.5, True, None, None, None, 2)
    assert len(be._op_calls["attention"].__self__.kept) == before + 1
    np.testing.assert_array_equal(out.get(), window)
