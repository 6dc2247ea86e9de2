"""The per-op harness on bfloat16 storage: every row of the op table run on the CPU backend
with bf16 tensors (``gen_backend("cpu", datatype="bf16")``: the bf16 boundary of
``backends/cpu/bf16_boundary.py``) against its float64 reference evaluated on the
bf16-rounded inputs.

The bound.  The boundary widens each bf16 input exactly, runs the float32 implementation on
those values, and rounds each written operand to bf16 (8 significant bits, nearest even):
|bf16(v) - v| <= 2^-8 |v|.  The float32 result v is within the float32 harness's tolerance of
the float64 reference on the same inputs, |v - want| <= t_r |want| + t_a (t_r = t_a = 2e-5 for
the dispatched rows, t_r = 2e-4 and t_a = 2e-5 for the section rows, as in
``test_op_table.py``), so

    |got - want| <= (2^-8 + t_r + 2^-8 t_r) |want| + (1 + 2^-8) t_a

and the tests use rtol = 2^-8 + 1.01 t_r, atol = 1.01 t_a.  Inputs are rounded before the
reference sees them, so no input rounding enters.  Rows without a reference or case (the
op-trees, one-hot rows, random draws, max pooling's backward, whose routing is the backend's
state, batch norm's host moments, axis permutations) are tested below one by one."""
import numpy as np
import pytest
from support import op_harness as harness
from support.op_harness import REFERENCED, REFERENCED_IDS, STATEFUL
from support.operand_cases import cases
from support.requires import requires

import neonlite
from neonlite.backends.cpu.optree import OpTreeMachine
from neonlite.backends.ops import OPS
from neonlite.backends.ops.table import CALL
from neonlite.backends.shared.bfloat16 import BFLOAT16, bf16_to_f32, f32_to_bf16

U_BF16 = 2.0 ** -8
DISPATCHED = [op for op in OPS.values() if op.dispatched]
#: the rows this file tests one by one (no reference, no operand case, or a stateful case)
ONE_BY_ONE = {"execute", "execute_multi", "onehot", "uniform", "dropout_mask",
              "example_dropout_mask", "bprop_pool", "batchnorm_moments", "permute_axes"}


def _bf16_backend():
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype="bf16")
    assert be.dtype == BFLOAT16 and be.dtype.metadata == {"bfloat16": True}
    return be


def _rounded(a):
    return None if a is None else bf16_to_f32(f32_to_bf16(a.astype(np.float32)))


def test_every_row_is_run_on_bf16():
    covered = {op.name for op in DISPATCHED} | {c.op for c in REFERENCED}
    assert sorted(set(OPS) - covered) == sorted(ONE_BY_ONE - covered)
    assert {("bprop_pool", ("max",))} == STATEFUL


@requires("compiler")
@pytest.mark.parametrize("op", DISPATCHED, ids=[op.name for op in DISPATCHED])
def test_dispatched_rows_on_bf16_match_the_reference_on_rounded_inputs(op):
    be = _bf16_backend()
    made = harness.plans(be, op)
    for joined in harness.joins(op):
        arrays = {n: _rounded(a) for n, a in
                  op.sample_operands(np.random.default_rng(1), np.float32, joined).items()}
        tensors = {n: None if a is None else be.array(a) for n, a in arrays.items()}
        assert all(t.storage == "bf16" for t in tensors.values() if t is not None)
        getattr(be, op.name)(**made, **tensors, **harness.scalars(op))
        got = {n: None if t is None else t.get() for n, t in tensors.items()}
        harness.compare(op, got, harness.reference(op, arrays, made),
                        U_BF16 + 1.01 * 2e-5, 1.01 * 2e-5)


@requires("compiler")
@pytest.mark.parametrize("case", REFERENCED, ids=REFERENCED_IDS)
def test_section_rows_on_bf16_match_the_reference_on_rounded_inputs(case):
    harness.backend_matches_the_reference(_bf16_backend(), case, rtol=U_BF16 + 1.01 * 2e-4,
                                          atol=1.01 * 2e-5)


#: rows whose kernel's bf16_symbol the table calls (a row run whole by its section file, the
#: attention's, is tested with its section: tests/cpu/test_cpu_bf16_attention.py)
BF16_KERNELS = [op for op in DISPATCHED if op.kernel.arguments != CALL and (
    op.kernel.bf16_symbol or any(k.bf16_symbol for k in (op.kernel.choices or {}).values()))]
#: the rows whose bf16 kernel sums a row its own way (layer norm's one-pass statistics, the
#: norms' sums by 256-column chunks, layer norm's parameter gradients in double): within bf16
#: rounding of the reference (``tests/cpu/test_cpu_bf16_norm_rows.py``), not bit for bit the
#: widening path's
OWN_SUMS = {"layernorm_fprop", "layernorm_bprop", "rmsnorm_fprop", "rmsnorm_bprop"}
WIDENING_BITS = [op for op in BF16_KERNELS if op.name not in OWN_SUMS]
#: rows whose bf16 kernel sums over the rows in an order of its own (batch norm's: each lane in
#: double, in fixed row blocks, where the float32 kernel runs float sums of 32 periods first):
#: their results are within one bf16 rounding of the widening path's, not its bits
SUMMED_APART = {"batchnorm_bprop"}


@requires("compiler")
@pytest.mark.parametrize("op", WIDENING_BITS, ids=[op.name for op in WIDENING_BITS])
def test_rows_with_a_bf16_kernel_give_the_widening_paths_bits(monkeypatch, op):
    """A row whose kernel has a ``bf16_symbol`` (a C function staging bf16 rows itself) runs it
    when every operand is bf16, and gives bit for bit what widening, the float32 kernel and
    narrowing give (at a width past one staged chunk of 256 columns); a row of
    :data:`SUMMED_APART`, within one bf16 rounding of it; the rows of ``OWN_SUMS`` are tested
    against the reference instead."""
    from neonlite.backends.cpu.build import KernelModules
    calls = []
    original = KernelModules.run_bf16_op

    def counted(self, *args, **kwargs):
        calls.append(original(self, *args, **kwargs))
        return calls[-1]
    sample = dict(op.sample, M=7, D=300)
    results = []
    for fused in (True, False):
        monkeypatch.setattr(KernelModules, "run_bf16_op",
                            counted if fused else lambda *args, **kwargs: False)
        be = _bf16_backend()
        for joined in harness.joins(op):
            rng = np.random.default_rng(5)
            arrays = {o.name: None if (not joined and (o.trailing or (o.optional and not
                                                                     o.written)))
                      else _rounded(rng.normal(size=tuple(sample[d] if isinstance(d, str) else
                                                          d for d in o.shape)))
                      for o in op.operands}
            tensors = {n: None if a is None else be.array(a) for n, a in arrays.items()}
            getattr(be, op.name)(**tensors, **harness.scalars(op))
            results.append([t._ary.copy() for t in tensors.values() if t is not None])
    assert calls and all(calls), "the bf16 kernel ran"
    half = len(results) // 2
    for fused, widened in zip(results[:half], results[half:]):
        for a, b in zip(fused, widened):
            if op.name in SUMMED_APART:
                np.testing.assert_allclose(bf16_to_f32(a), bf16_to_f32(b),
                                           rtol=2 * U_BF16, atol=1e-6)
            else:
                np.testing.assert_array_equal(a, b)


def _pair(seed, *shape):
    """(bf16 tensor, its float32 values) of normal values."""
    be = neonlite.get_backend()
    t = be.array(np.random.default_rng(seed).normal(size=shape).astype(np.float32))
    return t, t.get()


def _within(got, want):
    np.testing.assert_allclose(got, want, rtol=U_BF16 + 1e-6, atol=1e-6)


def test_op_trees_load_and_store_bf16():
    """``execute``: elementwise trees (the machine's bf16 loads and stores), a tree with an
    inner reduction (a bias gradient), a broadcast row, mixed bf16 and float32 leaves, a
    float32 output of bf16 leaves."""
    be = _bf16_backend()
    (a, av), (b, bv) = _pair(1, 37, 53), _pair(2, 37, 53)
    row, rowv = _pair(3, 53)
    f32 = be.array(np.random.default_rng(4).normal(size=(37, 53)), dtype=np.float32)
    out = be.empty((37, 53))
    out[:] = a * b + be.exp(a * 0.5) - row
    _within(out.get(), av * bv + np.exp(av * 0.5) - rowv)
    out[:] = a * f32 + 1.0
    _within(out.get(), av * f32.get() + 1.0)
    bias = be.empty((1, 53))
    bias[:] = be.sum(a * b, axis=0) * 0.5
    _within(bias.get(), (av * bv).sum(0, keepdims=True) * 0.5)
    wide = be.empty((37, 53), dtype=np.float32)
    wide[:] = be.sqrt(be.absolute(a)) + b
    np.testing.assert_allclose(wide.get(), np.sqrt(np.abs(av)) + bv, rtol=1e-6, atol=1e-6)
    strided = be.zeros((37, 106))
    strided[:, ::2] = a + b
    _within(strided.get()[:, ::2], av + bv)
    assert not strided.get()[:, 1::2].any()
    machine = OpTreeMachine(be.kernels)
    assert machine.run(np.asarray(out.get()), a * f32 + row, bf16=True), \
        "the machine takes bf16 leaves beside float32 ones"
    assert machine.run(strided[:, ::2]._ary, a * 2.0 - b, bf16=True), \
        "the machine stores a strided bf16 output"
    _within(strided.get()[:, ::2], av * 2.0 - bv)
    assert not machine.run(bias._ary, be.sum(a, axis=0) + 1.0, bf16=True), \
        "an inner reduction of bf16 leaves is left to the widening path"


def test_execute_multi_reads_earlier_outputs_new_values():
    """``execute_multi`` on bf16: a later tree reads an earlier output's new (rounded)
    value, as the optimizer steps' velocity and weights do."""
    be = _bf16_backend()
    (v, vv), (w, wv), (g, gv) = _pair(5, 8, 21), _pair(6, 8, 21), _pair(7, 8, 21)
    be.execute_multi([(v, v * 0.9 - g * 0.1), (w, w + v)])
    new_v = v.get()
    _within(new_v, vv * 0.9 - gv * 0.1)
    _within(w.get(), wv + new_v)


def test_copies_fills_and_host_values():
    """A bf16 tensor copied into a bf16 tensor keeps its bits; a fill stores the scalar
    rounded; float values (a host array, a float32 tensor) are rounded to nearest even."""
    be = _bf16_backend()
    a, av = _pair(8, 5, 7)
    b = be.empty((5, 7))
    b[:] = a
    np.testing.assert_array_equal(b.get().view(np.uint32), av.view(np.uint32))
    b.fill(1.0 + 2.0 ** -8)  # a tie: to the even neighbour, 1.0
    assert (b.get() == 1.0).all()
    b[:] = 1.0 + 3 * 2.0 ** -8  # a tie the other way: 1 + 2^-6
    assert (b.get() == 1.0 + 2.0 ** -6).all()
    host = np.random.default_rng(9).normal(size=(5, 7)).astype(np.float32)
    b[:] = be.array(host, dtype=np.float32)
    np.testing.assert_array_equal(b.get(), _rounded(host))
    c = be.zeros((5, 7), dtype=np.float32)
    c[:] = a
    np.testing.assert_array_equal(c.get(), av)
    assert ("assign", "value") not in [key[0] for key in be.bf16_boundary._work], \
        "a bf16 tensor widens straight into a contiguous float32 one"
    wide = be.zeros((5, 14), dtype=np.float32)
    wide[:, ::2] = a
    np.testing.assert_array_equal(wide.get()[:, ::2], av)
    np.testing.assert_array_equal(wide.get()[:, 1::2], 0.0)


def test_fill_writes_its_view_only_and_rounds_as_assignment():
    """``fill`` of a column slice changes that slice only; a NaN fill stores the quiet NaN
    0x7FC0 as every kernel's rounding does; integer and float32 tensors of a bf16 backend and
    a tensor value fill as ``t[:] = value`` does."""
    be = _bf16_backend()
    a, av = _pair(10, 4, 6)
    a[:, 1:3].fill(-2.5)
    expected = av.copy()
    expected[:, 1:3] = -2.5
    np.testing.assert_array_equal(a.get(), expected)
    a.fill(float("nan"))
    assert (np.asarray(a._ary).view(np.uint16) == 0x7FC0).all()
    a.fill(-0.0)
    assert (np.asarray(a._ary).view(np.uint16) == 0x8000).all()
    a.fill(0.0)
    assert (np.asarray(a._ary).view(np.uint16) == 0).all()
    ids = be.zeros((3,), dtype=np.int32)
    ids.fill(7)
    np.testing.assert_array_equal(ids.get(), [7, 7, 7])
    wide = be.zeros((2, 3), dtype=np.float32)
    wide.fill(0.1)
    np.testing.assert_array_equal(wide.get(), np.full((2, 3), 0.1, np.float32))
    b, bv = _pair(11, 4, 6)
    a.fill(b)
    np.testing.assert_array_equal(a.get(), bv)


def test_onehot_and_random_draws_into_bf16():
    be = _bf16_backend()
    out = be.zeros((4, 6))
    be.onehot(be.array(np.array([0, 5, 2, 2]), dtype=np.int32), out)
    np.testing.assert_array_equal(out.get(), np.eye(6)[[0, 5, 2, 2]])
    u = be.empty((50, 40))
    be.uniform(u, -2.0, 3.0)
    assert -2.0 <= u.get().min() and u.get().max() <= 3.0 and u.get().std() > 1.0
    mask = be.empty((50, 40))
    be.dropout_mask(mask, 0.75)
    assert set(np.unique(mask.get())) <= {0.0, float(_rounded(np.array([1 / 0.75]))[0])}
    example = be.empty((4, 30))
    be.example_dropout_mask(example, 0.5, 7, 0, 1, 0)
    f32 = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    want = f32.empty((4, 30))
    f32.example_dropout_mask(want, 0.5, 7, 0, 1, 0)
    np.testing.assert_array_equal(example.get(), want.get())


@requires("compiler")
@pytest.mark.parametrize("op", ["max", "avg"])
def test_pooling_fprop_and_bprop_pair_on_bf16(op):
    """Max pooling's backward routes by the argmax its forward kept: the pair on bf16 against
    the float32 backend on the same rounded values."""
    results = []
    for datatype in ("bf16", np.float32):
        be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=datatype)
        rng = np.random.default_rng(10)
        plan = be.pool_layer(op, 2, 3, 7, 7, 3, 3, pad=(1, 1), stride=(2, 2))
        x = be.array(_rounded(rng.normal(size=(2, 7, 7, 3))))
        y = be.zeros((2, plan.P, plan.Q, 3))
        e = be.array(_rounded(rng.normal(size=(2, plan.P, plan.Q, 3))))
        dx = be.zeros((2, 7, 7, 3))
        be.fprop_pool(plan, x, y)
        be.bprop_pool(plan, e, dx)
        results.append((y.get(), dx.get()))
    for got, want in zip(*results):
        _within(got, want)


def test_batchnorm_moments_and_permutations_of_bf16():
    """The host moments of bf16 rows are float64 sums of their values; a permutation moves
    bits."""
    be = _bf16_backend()
    x, xv = _pair(12, 40, 6)
    mean, m2 = be.batchnorm_moments(x)
    np.testing.assert_allclose(mean, xv.mean(0, dtype=np.float64), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m2, ((xv - xv.mean(0, dtype=np.float64)) ** 2).sum(0),
                               rtol=1e-5)
    y, yv = _pair(13, 2, 3, 4, 5)
    out = be.empty((4, 2, 5, 3))
    be.permute_axes(y, out, (2, 0, 3, 1))
    np.testing.assert_array_equal(out.get(), yv.transpose(2, 0, 3, 1))


def test_bit_pattern_nodes_refuse_bf16_tensors():
    """``bf16_to_f32`` / ``f32_to_bf16`` convert plain uint16 bits (Adam's bf16 states); a
    bf16 tensor's values are numbers, so the nodes refuse it rather than read them as
    integers; on plain uint16 tensors they still convert."""
    be = _bf16_backend()
    a, _ = _pair(11, 3, 4)
    out = be.empty((3, 4), dtype=np.float32)
    with pytest.raises(TypeError, match="bf16_to_f32 takes uint16 bit patterns"):
        out[:] = be.bf16_to_f32(a)
    bits = be.array(f32_to_bf16(np.full((3, 4), 1.5, np.float32)), dtype=np.uint16)
    out[:] = be.bf16_to_f32(bits)
    assert (out.get() == 1.5).all()
