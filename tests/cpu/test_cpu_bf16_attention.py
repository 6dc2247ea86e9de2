"""The fused attention on bf16 tensors (``fa_fprop_bf16`` / ``fa_bprop_bf16`` of
``kernels/cpu/flash_attention.c``, called by ``backends/cpu/attention.py``): the kernels widen
each tile's rows as they read them and round the rows they write, with every sum of the float32
kernels, so their results are bit for bit those of the bf16 boundary's way (every operand
widened whole, the float32 kernel, the outputs narrowed whole), which is never taken.

The bound against the float64 reference.  The inputs are bf16 values, so none is rounded on the
way in.  The bf16 result is RNE(v), v the float32 kernels' result on the same values (the bits
test below), and the float32 kernels meet |v - want| <= t (|want| + 1) with t = 2e-5
(``tests/backend/test_attention_op.py``'s float32 tolerance) against the float64 reference on
those inputs.  Rounding to 8 significant bits moves v by at most 2^-8 |v|, so

    |got - want| <= (2^-8 + t + 2^-8 t) |want| + (1 + 2^-8) t,

and the tests use rtol = 2^-8 + 1.01 t, atol = 1.01 t.  lse stays float32: rtol = atol = t.
The backward takes out as the forward rounded it (the reference gets the same bf16 out)."""
import os

from support.harness import build
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.cpu.bf16_boundary import Bf16Boundary
from neonlite.backends.cpu.threads import set_cpu_threads
from neonlite.backends.reference import attention as numpy_attention
from neonlite.backends.shared.attention_tables import AttentionBlocks, AttentionDropout
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.layers import MultiHeadAttention

pytestmark = requires("compiler")

U_BF16 = 2.0 ** -8
T32 = 2e-5
# (N, H, Tq, Tk, dk, dv, causal, key mask, dropout, blocks): rows, keys and widths that are not
# multiples of the 64-row tiles, of 16 or of 32
CASES = {
    # 16 slices: one backward work item a slice (dQ summed in the thread's float rows)
    "causal, one group a slice": (8, 2, 71, 71, 37, 23, True, False, False, False),
    # 4 slices: key blocks in groups, each group's dQ a float partial
    "padding+dropout, groups": (2, 2, 45, 130, 19, 29, False, True, True, False),
    "causal offset, long": (1, 2, 290, 301, 19, 13, True, True, True, False),
    "decode": (2, 2, 1, 75, 12, 12, True, False, False, False),
    "blocks": (2, 2, 67, 99, 9, 11, True, True, False, True),
    # a slice's keys and values past 1 MiB: query blocks (forward) and key blocks (backward)
    # in fa_group's groups of four
    "grouped": (1, 1, 2100, 2100, 67, 61, True, False, False, False),
}


def _case(name, seed=0):
    """(float32 bf16-exact q, k, v, dout head-major (B, T, d); key mask (N, Tk) or None;
    keyword arguments of the attention rows) of case ``name`` (of :data:`CASES`, or its
    tuple)."""
    N, H, Tq, Tk, dk, dv, causal, padded, drop, blocked = CASES.get(name, name)
    rng = np.random.default_rng(seed)
    B = N * H
    arrays = [bf16_to_f32(f32_to_bf16(rng.normal(size=s).astype(np.float32)))
              for s in ((B, Tq, dk), (B, Tk, dk), (B, Tk, dv), (B, Tq, dv))]
    mask = None
    if padded:
        mask = (rng.random((N, Tk)) > 0.3).astype(np.float32)
        mask[0, -5:] = 0  # trailing padding: the tiles stop at the last visible key
    kw = dict(causal=causal, dropout=AttentionDropout(0.7, 1234, 5, 99, 3) if drop else None,
              blocks=AttentionBlocks(rng.random((H, -(-Tq // 16), -(-Tk // 16))) > 0.4, 16, 16)
              if blocked else None, heads=H)
    return arrays, mask, kw


def _joined(be, arrays, heads):
    """q, k, v as token-major (N, T, H, d) views of one (N, T, 3 H d) buffer, as a
    self-attention layer's projections are (k and v of their own buffer when Tk != Tq or
    dk != dv), and dout as the (N, T, H, dv) view of a merged (N, T, H dv) row."""
    q, k, v, dout = arrays
    B, Tq, dk = q.shape
    N = B // heads
    tokens = lambda a: a.reshape(N, heads, a.shape[1], a.shape[2]).transpose(0, 2, 1, 3)  # noqa: E731
    if k.shape == q.shape and v.shape == q.shape:
        full = np.concatenate([tokens(a) for a in (q, k, v)], axis=2)
        buf = be.array(np.ascontiguousarray(full).reshape(N, Tq, 3 * heads * dk))
        view = buf.reshape(N, Tq, 3 * heads, dk)
        views = [view[:, :, i * heads:(i + 1) * heads] for i in range(3)]
    else:
        views = [be.array(np.ascontiguousarray(tokens(a))) for a in (q, k, v)]
    merged = be.array(np.ascontiguousarray(tokens(dout)).reshape(N, Tq, -1))
    return views + [merged.reshape(N, Tq, heads, dout.shape[2])]


def _run(be, tensors, mask, kw, lse_dtype=np.float32):
    """out, lse, dq, dk, dv (float arrays) of the attention rows on ``tensors`` (q, k, v,
    dout of ``be``); out is given to the backward as the forward left it."""
    q, k, v, dout = tensors
    B = kw["heads"] * q.shape[0] if q.ndim == 4 else q.shape[0]
    Tq = q.shape[1]
    out, lse = be.zeros(dout.shape), be.zeros((B, Tq), dtype=lse_dtype)
    grads = [be.zeros(t.shape) for t in (q, k, v)]
    m = None if mask is None else be.array(mask)
    be.attention(q, k, v, out, lse, 0.3, key_mask=m, **kw)
    be.attention_bprop(q, k, v, out, lse, dout, *grads, 0.3, key_mask=m, **kw)
    return [np.asarray(t.get(), dtype=np.float32) for t in [out, lse] + grads]


def _widened_way(case, layout):
    """The bf16 boundary's results: the float32 kernels on the widened values, each written
    operand rounded (out before the backward reads it)."""
    arrays, mask, kw = _case(case)
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
    tensors = _tensors(be, arrays, kw, layout)
    q, k, v, dout = tensors
    B, Tq = (kw["heads"] * q.shape[0] if q.ndim == 4 else q.shape[0]), q.shape[1]
    out, lse = be.zeros(dout.shape), be.zeros((B, Tq))
    grads = [be.zeros(t.shape) for t in (q, k, v)]
    m = None if mask is None else be.array(mask)
    be.attention(q, k, v, out, lse, 0.3, key_mask=m, **kw)
    out[:] = be.array(_rounded(out.get()))
    be.attention_bprop(q, k, v, out, lse, dout, *grads, 0.3, key_mask=m, **kw)
    return [_rounded(out.get()), lse.get()] + [_rounded(g.get()) for g in grads]


def _rounded(a):
    return bf16_to_f32(f32_to_bf16(np.asarray(a, dtype=np.float32)))


def _tensors(be, arrays, kw, layout):
    return [be.array(a) for a in arrays] if layout == "head-major" else \
        _joined(be, arrays, kw["heads"])


def _root(a):
    """The array whose memory view ``a`` is."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _bf16_backend():
    return neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype="bf16")


@pytest.fixture
def swaps(monkeypatch):
    """The op names the bf16 boundary widened operands for (``Bf16Boundary.swap``)."""
    seen = []
    original = Bf16Boundary.swap

    def swap(self, op_name, operands):
        seen.append(op_name)
        return original(self, op_name, operands)
    monkeypatch.setattr(Bf16Boundary, "swap", swap)
    return seen


@pytest.mark.parametrize("layout", ["head-major", "token-major views"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bf16_kernels_give_the_widening_paths_bits(case, layout, swaps):
    arrays, mask, kw = _case(case)
    be = _bf16_backend()
    got = _run(be, _tensors(be, arrays, kw, layout), mask, kw)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, _widened_way(case, layout)):
        np.testing.assert_array_equal(g, w, err_msg=name)
    assert not [n for n in swaps if n.startswith("attention")], \
        "the attention operands were widened whole"


@pytest.mark.parametrize("case", sorted(CASES))
def test_bf16_kernels_within_the_bound_of_the_float64_reference(case):
    arrays, mask, kw = _case(case)
    be = _bf16_backend()
    got = _run(be, [be.array(a) for a in arrays], mask, kw)
    q, k, v, dout = (a.astype(np.float64) for a in arrays)
    out, lse = np.zeros(dout.shape), np.zeros(dout.shape[:2])
    grads = [np.zeros(a.shape) for a in (q, k, v)]
    args = (0.3, kw["causal"], mask, kw["dropout"], kw["blocks"], kw["heads"])
    numpy_attention.attention(q, k, v, out, lse, *args)
    want_out = out.copy()
    out[:] = got[0]  # the backward reads out as rounded
    numpy_attention.attention_bprop(q, k, v, out, lse, dout, *grads, *args)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, [want_out, lse] + grads):
        finite = np.isfinite(w)
        assert (np.isfinite(g) == finite).all(), f"{name}: -inf rows differ"
        tol = (T32, T32) if name == "lse" else (U_BF16 + 1.01 * T32, 1.01 * T32)
        np.testing.assert_allclose(g[finite], w[finite], rtol=tol[0], atol=tol[1],
                                   err_msg=name)


@pytest.mark.parametrize("case", ["causal, one group a slice", "padding+dropout, groups",
                                  "grouped"])
def test_bf16_kernels_are_bit_identical_on_1_2_3_threads(case):
    _assert_bit_identical_on_1_2_3_threads(*_case(case))


def _assert_bit_identical_on_1_2_3_threads(arrays, mask, kw, ran=lambda be: True):
    """The five results of :func:`_run` on token-major views, on 1, 2 and 3 threads, are the
    same bits (and ``ran(backend)`` holds after each run)."""
    results = []
    try:
        for threads in (1, 2, 3):
            set_cpu_threads(threads)
            be = _bf16_backend()
            results.append(_run(be, _joined(be, arrays, kw["heads"]), mask, kw))
            assert ran(be)
    finally:
        set_cpu_threads(len(os.sched_getaffinity(0)))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_a_bf16_lse_goes_the_widening_way():
    """lse must be float32 for the bf16 kernels: a bf16 one is widened and narrowed by the
    boundary, with the float32 kernels (the same out, lse rounded)."""
    arrays, mask, kw = _case("padding+dropout, groups")
    be = _bf16_backend()
    got = _run(be, [be.array(a) for a in arrays], mask, kw, lse_dtype=None)
    want = _widened_way("padding+dropout, groups", "head-major")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], _rounded(want[1]))


def test_a_bf16_layer_runs_the_kernels_on_its_projection_views(swaps, monkeypatch):
    """MultiHeadAttention on bf16: q, k and v reach the kernels as strided views of the joined
    projection (no copies), and the boundary widens none of the attention's operands."""
    from neonlite.backends.cpu.attention import CPUAttentionCalls
    seen = []
    original = CPUAttentionCalls.run

    def run(self, op, operands, scalars):
        seen.append((op.name, [t._ary for t in operands[:3]]))
        return original(self, op, operands, scalars)
    monkeypatch.setattr(CPUAttentionCalls, "run", run)
    be = neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype="bf16")
    net = build(MultiHeadAttention(48, 4, causal=True, name="attn"), (37, 48))
    rng = np.random.default_rng(3)
    out = net.fprop(be.array(rng.normal(size=(3, 37, 48)))).get()
    grad = net.bprop(be.array(rng.normal(size=(3, 37, 48)))).get()
    assert np.isfinite(out).all() and np.isfinite(grad).all()
    assert [name for name, _ in seen] == ["attention", "attention_bprop"]
    for _, (q, k, v) in seen:
        assert q.dtype == np.uint16 and not q.flags.c_contiguous
        assert _root(q) is _root(k) is _root(v)
    assert not [n for n in swaps if n.startswith("attention")]


# The compute path (``kernels/cpu/bf16/attention_compute.c``: the products on the bf16 GEMM,
# the softmax and its gradient in float32), run on the AMX kernel's code with its tile
# instructions emulated in C (every CPU).  Its bound against the float64 reference on the same
# bf16 inputs: the probabilities P are rounded to bf16 for the products (at most 2^-8 relative),
# as dS = P (dP - D) scale is, each output once more (2^-8 |want|), and the float32 scores,
# softmax and sums add at most T32 relative to the sizes of their terms.  So, with sizes
# |P| |v| (out), |P|^T |dout| (dv), |dS~| |k| and |dS~|^T |q| (dq, dk; |dS~| = |P| (|dP| + |D|)
# scale),
#
#     |got - want| <= 2^-8 |want| + 1.01 (2^-8 + 2 T32) size + T32,
#
# and lse, float32 from float32 scores, meets the float32 kernels' T32.
COMPUTE_CASES = {
    "causal": (8, 2, 71, 71, 37, 23, True, False, False, False),
    "padding, cross": (2, 2, 45, 130, 19, 29, False, True, False, False),
    "causal offset, padding, long": (1, 2, 290, 301, 19, 13, True, True, False, False),
    "decode": (2, 2, 1, 75, 12, 12, True, False, False, False),
}


@pytest.fixture
def compute_path(monkeypatch):
    """bf16 backends whose attention (and products) take the compute path on the emulated AMX
    kernel (``NEONLITE_BF16=compute``, the bf16 GEMM module replaced)."""
    from neonlite.backends.cpu import bf16 as bf16_ops
    from neonlite.backends.cpu import bf16_choice
    emulated = _bf16_backend().kernels.variant("gemm_bf16_amx_emulated")
    for where in (bf16_ops, bf16_choice):
        monkeypatch.setattr(where, "gemm_module", lambda modules: (emulated, "emulated"))
    monkeypatch.setattr(bf16_choice, "gemm_variant", lambda: ("gemm_bf16_amx", "emulated"))
    monkeypatch.setenv("NEONLITE_BF16", "compute")


def _ran_compute(be):
    """Whether the compute path ran on ``be`` (its work array is kept) and the flash kernels
    did not."""
    keys = {key[0] for key in be.kernels.workspaces if isinstance(key, tuple)}
    return "att_compute" in keys and "fa_work" not in keys


def _sizes(arrays, out, lse, mask, kw, scale=0.3):
    """The sizes of the bound above (float64), for out, dq, dk, dv."""
    q, k, v, dout = (a.astype(np.float64) for a in arrays)
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
    sizes = [np.zeros(a.shape) for a in (dout, q, k, v)]
    for b in range(B):
        hidden = numpy_attention.hidden_keys(B, kw["heads"], Tq, Tk, kw["causal"], mask, None, b)
        p, _ = numpy_attention._probabilities(q[b], k[b], scale, hidden,
                                              lse[b].astype(np.float64))
        dp = dout[b] @ v[b].T
        d = np.einsum("ij,ij->i", dout[b], out[b].astype(np.float64))[:, None]
        ds = np.abs(p) * (np.abs(dp) + np.abs(d)) * scale
        for size, value in zip(sizes, (p @ np.abs(v[b]), ds @ np.abs(k[b]),
                                       ds.T @ np.abs(q[b]), p.T @ np.abs(dout[b]))):
            size[b] = value
    return sizes


@pytest.mark.parametrize("case", sorted(COMPUTE_CASES))
def test_compute_path_within_its_bound_on_both_layouts(compute_path, case):
    """Forward and backward on the compute path meet the bound above against the float64
    reference, give the same bits for head-major operands and for token-major views of one
    projection buffer (the sums' order does not depend on the strides), and run no flash
    kernel."""
    arrays, mask, kw = _case(COMPUTE_CASES[case])
    be = _bf16_backend()
    got = _run(be, [be.array(a) for a in arrays], mask, kw)
    assert _ran_compute(be)
    joined = _bf16_backend()
    views = _run(joined, _joined(joined, arrays, kw["heads"]), mask, kw)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, views):
        w = w.reshape(g.shape) if name == "lse" else \
            w.reshape(w.shape[0], w.shape[1], kw["heads"], -1).transpose(0, 2, 1, 3).reshape(
                g.shape)
        np.testing.assert_array_equal(g, w, err_msg=f"{name}: layouts differ")
    q, k, v, dout = (a.astype(np.float64) for a in arrays)
    out, lse = np.zeros(dout.shape), np.zeros(dout.shape[:2])
    grads = [np.zeros(a.shape) for a in (q, k, v)]
    args = (0.3, kw["causal"], mask, None, None, kw["heads"])
    numpy_attention.attention(q, k, v, out, lse, *args)
    want_out = out.copy()
    out[:] = got[0]
    numpy_attention.attention_bprop(q, k, v, out, lse, dout, *grads, *args)
    finite = np.isfinite(lse)
    assert (np.isfinite(got[1]) == finite).all(), "-inf rows differ"
    np.testing.assert_allclose(got[1][finite], lse[finite], rtol=T32, atol=T32)
    sizes = _sizes(arrays, got[0], got[1], mask, kw)
    for name, g, w, size in zip(("out", "dq", "dk", "dv"), [got[0]] + got[2:],
                                [want_out] + grads, sizes):
        bound = U_BF16 * np.abs(w) + 1.01 * (U_BF16 + 2 * T32) * size + T32
        over = np.abs(g - w) - bound
        assert over.max() <= 0, f"{name} over the bound by {over.max()}"


def test_compute_path_is_bit_identical_on_1_2_3_threads(compute_path):
    _assert_bit_identical_on_1_2_3_threads(*_case(COMPUTE_CASES["padding, cross"]),
                                           ran=_ran_compute)


@pytest.mark.parametrize("case", ["padding+dropout, groups", "blocks"])
def test_dropout_and_block_layouts_stay_on_the_flash_kernels(compute_path, case):
    """The compute path takes neither dropout nor a block layout: those run the flash
    kernels' bf16 entry points, bit for bit as without the compute path."""
    arrays, mask, kw = _case(case)
    be = _bf16_backend()
    got = _run(be, [be.array(a) for a in arrays], mask, kw)
    assert not _ran_compute(be)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got,
                          _widened_way(case, "head-major")):
        np.testing.assert_array_equal(g, w, err_msg=name)


def test_the_profiler_names_attention_compute_where_it_runs(compute_path):
    """``kernel_variant`` (the profiler's variant column) of the attention rows on bf16
    tensors: ``attention_compute`` on the compute path, not where dropout or a block layout
    keeps the flash kernels."""
    arrays, mask, kw = _case("padding+dropout, groups")
    be = _bf16_backend()
    q, k, v, dout = (be.array(a) for a in arrays)
    out, lse = be.zeros(dout.shape), be.zeros(dout.shape[:2], dtype=np.float32)
    args = (q, k, v, out, lse, 0.3)
    assert be.kernel_variant("attention", args, {"causal": True}) == "attention_compute"
    grads = (q, k, v)
    assert be.kernel_variant("attention_bprop", args[:5] + (dout,) + grads + (0.3,),
                             {"heads": 2}) == "attention_compute"
    assert be.kernel_variant("attention", args, {"dropout": kw["dropout"]}) == be.name
    assert be.kernel_variant("attention", args + (False, None, kw["dropout"])) == be.name
