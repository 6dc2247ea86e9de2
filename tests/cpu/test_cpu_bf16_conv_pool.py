"""Convolution and pooling on bfloat16 tensors of the CPU backend that read and write bf16 in
their kernels (``backends/cpu/conv_bf16.py``, ``pool.py``'s ``*_bf16`` passes): the same bits as
the float32 kernels on the widened operands with the outputs narrowed (what the bf16 boundary
did with its float32 work copies), within bf16's rounding of the exact results, bit-identical
on 1, 2 and 3 threads, and no float32 work tensor kept by the boundary for them.

The bound.  The inputs are bf16 values, so widening them is exact; the kernel sums the n
products of an output (n = R*S*C taps of a forward pass, R*S*K of a data gradient, N*P*Q of a
weight gradient) in float32, each step rounding by at most u = 2^-24 relative, so the float32
result s differs from the exact sum S by at most n u sum|terms| (first order); it is rounded
once to bf16 (8 significant bits, to nearest: at most 2^-8 |s|).  So

    |out - S| <= 2^-8 |S| + (1 + 2^-8) n u sum|terms| + 2^-8 n u sum|terms|
              <= 2^-8 |S| + 2 n u sum|terms|                                    (BOUND)

(the weight gradient's partial sums are added in double: fewer roundings than n).  A max
pooling is exact (the winner's bits); an average rounds its float32 sum of at most R*S terms
and its scaling once each (BOUND with n = R*S + 1).
"""
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.plans import ConvPlan, PoolPlan
from neonlite.backends.reference import conv as conv_reference
from neonlite.backends.reference import pool as pool_reference
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16

pytestmark = [requires("compiler"), pytest.mark.usefixtures("keep_backend", "keep_threads")]

U = 2.0 ** -24
U_BF16 = 2.0 ** -8
#: (N, C, H, W, K, R, S, pad, stride): the first two with K a multiple of the direct kernels'
#: 16 lanes (their condition), the second with C 16, so its data gradient is direct too; the
#: third's stride the direct data gradient does not take, and the last two's K (20, as
#: mnist_cnn's, and 50) no direct kernel takes: the tiled passes (patches and MKL's GEMM) run
#: those where MKL is installed, else im2col through the boundary's general path; odd images,
#: filters, pads
CONVS = [(3, 5, 9, 11, 48, 3, 5, (1, 2), (1, 1)),
         (2, 16, 7, 13, 16, 5, 3, (2, 1), (1, 1)),
         (3, 3, 11, 9, 32, 3, 3, (1, 1), (2, 2)),
         (3, 5, 9, 11, 20, 5, 3, (2, 1), (1, 1)),
         (2, 7, 13, 10, 50, 3, 3, (1, 0), (2, 1))]
#: (op, N, C, H, W, R, S, pad, stride): disjoint windows (LeNet's 2x2/2), overlapping 3x3/2
#: with padding, and odd channel counts
POOLS = [(op, *shape) for op in ("max", "avg") for shape in
         [(3, 7, 10, 9, 2, 2, (0, 0), (2, 2)), (2, 5, 9, 11, 3, 3, (1, 1), (2, 2)),
          (2, 300, 5, 4, 2, 3, (0, 1), (1, 2))]]


def _bits(rng, shape):
    """bf16 bits of standard normal values."""
    return f32_to_bf16(rng.standard_normal(shape).astype(np.float32))


def _tensor(be, bits):
    t = be.empty(bits.shape)
    t._ary[...] = bits
    return t


def _conv_case(case, seed=0):
    N, C, H, W, K, R, S, pad, stride = case
    rng = np.random.default_rng(seed)
    plan = ConvPlan(N, C, H, W, K, R, S, pad, stride)
    return plan, {"x": _bits(rng, (N, H, W, C)), "f": _bits(rng, (R, S, C, K)),
                  "bias": _bits(rng, (K,)), "e": _bits(rng, (N, plan.P, plan.Q, K)),
                  "dx": _bits(rng, (N, H, W, C)), "df": _bits(rng, (R, S, C, K))}


def _conv_passes(be, case, data, beta, data_gradient=True):
    """The bits of fprop (bias, ReLU), bprop (unless not ``data_gradient``: a first layer's)
    and update (each with ``beta``) on backend ``be`` (bf16 tensors, or float32 ones of the
    widened bits, its outputs narrowed)."""
    N, C, H, W, K, R, S, pad, stride = case
    plan = be.conv_layer(N, C, H, W, K, R, S, pad=pad, stride=stride)
    bf16 = be.compute_dtype != np.dtype(be.dtype)
    make = (lambda b: _tensor(be, b)) if bf16 else (lambda b: be.array(bf16_to_f32(b)))
    out = lambda t: t._ary.copy() if bf16 else f32_to_bf16(t.get())  # noqa: E731
    x, f, e = make(data["x"]), make(data["f"]), make(data["e"])
    o = be.zeros((N, plan.P, plan.Q, K))
    be.fprop_conv(plan, x, f, o, bias=make(data["bias"]), relu=True)
    dx, df = make(data["dx"]), make(data["df"])
    if data_gradient:
        be.bprop_conv(plan, f, e, dx, beta=beta)
    be.update_conv(plan, x, e, df, beta=beta)
    return {"o": out(o), "dx": out(dx), "df": out(df)}, plan


def _conv_exact(plan, data, beta):
    """(exact results in float64, the sums of |terms|) of the three passes on the bits."""
    w = {k: bf16_to_f32(v).astype(np.float64) for k, v in data.items()}
    o = np.zeros((plan.N, plan.P, plan.Q, plan.K))
    conv_reference.fprop_conv(plan, w["x"], w["f"], o, w["bias"], False)
    ao = np.zeros_like(o)
    conv_reference.fprop_conv(plan, np.abs(w["x"]), np.abs(w["f"]), ao, np.abs(w["bias"]),
                              False)
    dx, adx = w["dx"].copy(), np.zeros_like(w["dx"])
    conv_reference.bprop_conv(plan, w["f"], w["e"], dx, beta)
    conv_reference.bprop_conv(plan, np.abs(w["f"]), np.abs(w["e"]), adx, 0.0)
    df, adf = w["df"].copy(), np.zeros_like(w["df"])
    conv_reference.update_conv(plan, w["x"], w["e"], df, beta)
    conv_reference.update_conv(plan, np.abs(w["x"]), np.abs(w["e"]), adf, 0.0)
    return ({"o": np.maximum(o, 0), "dx": dx, "df": df},
            {"o": ao, "dx": adx + abs(beta) * np.abs(w["dx"]),
             "df": adf + abs(beta) * np.abs(w["df"])})


@pytest.mark.parametrize("case", CONVS)
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_bf16_convolutions_are_the_float32_kernels_narrowed_within_the_bound(case, beta):
    plan, data = _conv_case(case)
    found, bplan = _conv_passes(neonlite.gen_backend("cpu", batch_size=case[0],
                                                     datatype="bf16"), case, data, beta)
    want, _ = _conv_passes(neonlite.gen_backend("cpu", batch_size=case[0]), case, data, beta)
    exact, size = _conv_exact(plan, data, beta)
    n = {"o": case[5] * case[6] * case[1] + 1, "dx": case[5] * case[6] * case[4] + 1,
         "df": case[0] * plan.P * plan.Q + 1}
    for name in ("o", "dx", "df"):
        np.testing.assert_array_equal(found[name], want[name], err_msg=name)
        err = np.abs(bf16_to_f32(found[name]) - exact[name])
        bound = U_BF16 * np.abs(exact[name]) + 2 * n[name] * U * size[name]
        assert (err <= bound).all(), (name, float((err - bound).max()))


@pytest.fixture
def compute_backends(monkeypatch):
    """``make(batch)``: bf16 backends whose convolutions take the compute path
    (``NEONLITE_BF16=compute``) on the AMX kernel's code with its tile instructions emulated in
    C (``gemm_bf16_amx_emulated``: every CPU), each checked to run ``conv_compute``."""
    from neonlite.backends.cpu import bf16 as bf16_ops
    monkeypatch.setenv("NEONLITE_BF16", "compute")

    def make(batch):
        be = neonlite.gen_backend("cpu", batch_size=batch, datatype="bf16")
        emulated = be.kernels.variant("gemm_bf16_amx_emulated")
        monkeypatch.setattr(bf16_ops, "gemm_module", lambda modules: (emulated, "emulated"))
        monkeypatch.setattr(type(be), "bf16_path", lambda self, op_class="gemm": "compute")
        assert be.bf16_conv_compute()[1] is emulated
        return be
    return make


@pytest.mark.parametrize("case", CONVS + [(2, 6, 5, 7, 9, 1, 1, (0, 0), (1, 1))])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_bf16_compute_convolutions_are_within_the_bound(compute_backends, case, beta):
    """The compute path (patches gathered as bf16, each tile's product on the bf16 GEMM) meets
    the module docstring's BOUND for every pass, whatever algorithm the float32 plan chose
    (direct, tiled, and a 1x1 filter's pointwise), and keeps no float32 work tensor."""
    plan, data = _conv_case(case)
    be = compute_backends(case[0])
    found, bplan = _conv_passes(be, case, data, beta)
    assert "compute work" in bplan._buffers, bplan.algorithm
    exact, size = _conv_exact(plan, data, beta)
    n = {"o": case[5] * case[6] * case[1] + 1, "dx": case[5] * case[6] * case[4] + 1,
         "df": case[0] * plan.P * plan.Q + 1}
    for name in ("o", "dx", "df"):
        err = np.abs(bf16_to_f32(found[name]) - exact[name])
        bound = U_BF16 * np.abs(exact[name]) + 2 * n[name] * U * size[name]
        assert (err <= bound).all(), (name, float((err - bound).max()))
    kept = {key[0][0] for holder in be.bf16_boundary.holders() for key in holder}
    assert not kept & {"fprop_conv", "bprop_conv", "update_conv"}, kept


def test_the_profiler_names_conv_compute_where_it_runs(compute_backends):
    """``kernel_variant`` (the profiler's variant column) of a convolution on bf16 tensors:
    ``conv_compute`` on the compute path, the plan's algorithm on float32 tensors."""
    case = CONVS[0]
    be = compute_backends(case[0])
    _, data = _conv_case(case)
    plan = _conv_passes(be, case, data, 0.0)[1]
    x = _tensor(be, data["x"])
    for method in ("fprop_conv", "bprop_conv", "update_conv"):
        assert be.kernel_variant(method, (plan, x)) == "conv_compute"
    float32 = neonlite.gen_backend("cpu", batch_size=case[0])
    assert float32.kernel_variant("fprop_conv", (plan, float32.array(bf16_to_f32(
        data["x"])))) == plan.algorithm


def test_bf16_compute_convolutions_are_bit_identical_on_1_2_3_threads(compute_backends):
    case = CONVS[3]
    _, data = _conv_case(case, seed=7)
    runs = []
    for threads in (1, 2, 3):
        be = compute_backends(case[0])
        be.set_threads(threads)
        runs.append(_conv_passes(be, case, data, 1.0)[0])
    for other in runs[1:]:
        for name in runs[0]:
            np.testing.assert_array_equal(other[name], runs[0][name], err_msg=name)


@pytest.mark.parametrize("case", CONVS[1:4])
def test_bf16_convolutions_are_bit_identical_on_1_2_3_threads(case):
    _, data = _conv_case(case, seed=5)
    runs = []
    for threads in (1, 2, 3):
        be = neonlite.gen_backend("cpu", batch_size=case[0], datatype="bf16")
        be.set_threads(threads)
        runs.append(_conv_passes(be, case, data, 1.0)[0])
    for other in runs[1:]:
        for name in runs[0]:
            np.testing.assert_array_equal(other[name], runs[0][name], err_msg=name)


def _pool_passes(be, case, data, beta):
    op, N, C, H, W, R, S, pad, stride = case
    plan = be.pool_layer(op, N, C, H, W, R, S, pad=pad, stride=stride)
    bf16 = be.compute_dtype != np.dtype(be.dtype)
    make = (lambda b: _tensor(be, b)) if bf16 else (lambda b: be.array(bf16_to_f32(b)))
    out = lambda t: t._ary.copy() if bf16 else f32_to_bf16(t.get())  # noqa: E731
    y = be.zeros((N, plan.P, plan.Q, C))
    be.fprop_pool(plan, make(data["x"]), y)
    dx = make(data["dx"])
    be.bprop_pool(plan, make(data["e"]), dx, beta=beta)
    return {"y": out(y), "dx": out(dx)}, plan


def _pool_case(case, seed=0):
    op, N, C, H, W, R, S, pad, stride = case
    rng = np.random.default_rng(seed)
    plan = PoolPlan(op, N, C, H, W, R, S, pad, stride)
    return plan, {"x": _bits(rng, (N, H, W, C)), "e": _bits(rng, (N, plan.P, plan.Q, C)),
                  "dx": _bits(rng, (N, H, W, C))}


@pytest.mark.parametrize("case", POOLS)
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_bf16_pooling_is_the_float32_kernels_narrowed_within_the_bound(case, beta):
    plan, data = _pool_case(case)
    found, _ = _pool_passes(neonlite.gen_backend("cpu", batch_size=case[1], datatype="bf16"),
                            case, data, beta)
    want, _ = _pool_passes(neonlite.gen_backend("cpu", batch_size=case[1]), case, data, beta)
    for name in ("y", "dx"):
        np.testing.assert_array_equal(found[name], want[name], err_msg=name)
    w = {k: bf16_to_f32(v).astype(np.float64) for k, v in data.items()}
    y = np.zeros((case[1], plan.P, plan.Q, case[2]))
    pool_reference.fprop_pool(plan, w["x"], y)
    if case[0] == "max":
        np.testing.assert_array_equal(bf16_to_f32(found["y"]), y)
    n = case[5] * case[6] + 1
    dx = w["dx"].copy()
    pool_reference.fprop_pool(plan, w["x"], y)
    pool_reference.bprop_pool(plan, w["e"], dx, beta)
    adx = abs(beta) * np.abs(w["dx"])
    pool_reference.bprop_pool(plan, np.abs(w["e"]), adx, 1.0)
    err = np.abs(bf16_to_f32(found["dx"]) - dx)
    assert (err <= U_BF16 * np.abs(dx) + 2 * n * U * adx).all()


@pytest.mark.parametrize("case", [POOLS[1], POOLS[4]])
def test_bf16_pooling_is_bit_identical_on_1_2_3_threads(case):
    _, data = _pool_case(case, seed=7)
    runs = []
    for threads in (1, 2, 3):
        be = neonlite.gen_backend("cpu", batch_size=case[1], datatype="bf16")
        be.set_threads(threads)
        runs.append(_pool_passes(be, case, data, 0.5)[0])
    for other in runs[1:]:
        for name in runs[0]:
            np.testing.assert_array_equal(other[name], runs[0][name], err_msg=name)


def test_bf16_convolutions_and_pooling_keep_no_float32_work_copies():
    """LeNet's convolution and pooling passes (direct) and mnist_cnn's (tiled, where MKL is
    installed) on bf16 leave the boundary no float32 work tensor (it kept one per operand: the
    bf16 row's peak memory above float32's)."""
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    passes = set()
    for case, beta, data_gradient in [((4, 1, 12, 12, 32, 5, 5, (2, 2), (1, 1)), 1.0, False),
                                      ((4, 32, 12, 12, 64, 5, 5, (2, 2), (1, 1)), 0.0, True),
                                      ((4, 20, 12, 12, 50, 5, 5, (0, 0), (1, 1)), 0.0, True)]:
        _, data = _conv_case(case)
        plan = _conv_passes(be, case, data, beta, data_gradient)[1]
        if plan.tiles is not None or plan.algorithm == "direct":
            passes.add(plan.algorithm)
            assert plan.bprop_algorithm in ("direct", "tiled")
    assert "direct" in passes
    pool = ("max", 4, 32, 12, 12, 2, 2, (0, 0), (2, 2))
    _, data = _pool_case(pool)
    _pool_passes(be, pool, data, 0.0)
    kept = {key[0][0] for holder in be.bf16_boundary.holders() for key in holder}
    assert not kept & {"fprop_conv", "bprop_conv", "update_conv", "fprop_pool", "bprop_pool"}, \
        kept
