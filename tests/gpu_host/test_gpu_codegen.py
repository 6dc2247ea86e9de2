"""The op-tree -> CUDA generator without a GPU: generated sources compile with nvcc for sm_80
and sm_90, and the same sources, run on the host emulator (``cuda_host_emulator``), give the
CPU backend's results for broadcasting, reductions on every axis, odd sizes, strided views,
float16/bfloat16 storage and trees that need several kernels."""
import subprocess

import numpy as np
import pytest
from support.gpu_host_tensors import EmulatedOpTrees, HostTensor
from support.requires import requires

import neonlite
from neonlite.backends.gpu import codegen
from neonlite.backends.cpu.backend import CPUTensor
from neonlite.backends.reference.optree import evaluate
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.backends.optree import OpNode


def _be():
    return neonlite.gen_backend("cpu", batch_size=1)


def representative_trees(be):
    """(name, tree, out) for the trees the brief names: optimizer steps, softmax bprop,
    reductions on every axis, broadcast rows and columns, comparisons, erf."""
    w, g, v = (HostTensor(np.zeros((7, 5), np.float32)) for _ in range(3))
    m16 = HostTensor(np.zeros((7, 5), np.uint16))
    row, col = HostTensor(np.zeros((1, 5), np.float32)), HostTensor(np.zeros((7, 1), np.float32))
    y, dy = HostTensor(np.zeros((4, 6, 9), np.float32)), HostTensor(np.zeros((4, 6, 9), np.float32))
    h16 = HostTensor(np.zeros((7, 5), np.float16))
    trees = [
        ("sgd_momentum_velocity", 0.9 * v - 0.01 * (g + 1e-4 * w), v),
        ("sgd_momentum_weights", w + v, w),
        ("adam_m_bf16", be.f32_to_bf16(0.9 * be.bf16_to_f32(m16) + 0.1 * g), m16),
        ("adam_w", w - 0.001 * be.bf16_to_f32(m16) / (be.sqrt(be.bf16_to_f32(m16)) * 1.2 + 1e-8),
         w),
        ("softmax_bprop", y * (dy - be.sum(dy * y, axis=-1)), dy),
        ("broadcast_row_col", w * row + col - be.erf(w), w),
        ("comparisons", (w > 0.0) * g + (w <= row) - (col == w) + (g != 1.0) * (g >= w), g),
        ("erf_gelu", 0.5 * w * (1.0 + be.erf(w * 0.7071)), h16),
    ]
    for axis in (0, 1, 2, (0, 2), None):
        shape = tuple(1 if axis is None or i in np.atleast_1d(axis) else s
                      for i, s in enumerate(y.shape))
        for op in ("sum", "max", "min"):
            trees.append((f"{op}_axis{axis}", OpNode(op, y * dy, axis=axis),
                          HostTensor(np.zeros(shape, np.float32))))
    trees.append(("argmax1", be.argmax(y, axis=1), HostTensor(np.zeros((4, 1, 9), np.float32))))
    return trees


@requires("nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_generated_sources_compile_with_nvcc(arch, tmp_path):
    be = _be()
    sources = {}
    for name, tree, out in representative_trees(be):
        kname, source = codegen.plan(tree, out).source()
        assert sources.setdefault(kname, source) == source, f"{name}: kernel name collision"
    bodies = [s.split(codegen.BODY_MARKER, 1)[1] for s in sources.values()]
    assert len(bodies) >= 12
    cu = tmp_path / "optrees.cu"
    cu.write_text(codegen.common_header() + "\n".join(bodies))
    result = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-o",
                             str(tmp_path / "optrees.cubin"), str(cu)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "optrees.cubin").stat().st_size > 0


def test_scalars_are_arguments_not_constants():
    w, g = HostTensor(np.zeros(10, np.float32)), HostTensor(np.zeros(10, np.float32))
    plans = [codegen.plan(w - lr * g, w) for lr in (0.1, 0.05)]
    assert plans[0].key == plans[1].key
    assert plans[0].source() == plans[1].source()
    assert plans[0].scalars == (0.1,) and plans[1].scalars == (0.05,)
    assert (w - 0.1 * g).key() == (w - 0.05 * g).key()


def test_contiguous_update_is_one_flat_loop_and_views_keep_their_axes():
    w = HostTensor(np.zeros((8, 3, 5), np.float32))
    assert codegen.plan(w * 2.0, w).key[1] == 1
    view = HostTensor(np.zeros((8, 6, 5), np.float32)[:, ::2])
    assert codegen.plan(view * 2.0, view).key[1] == 2


def test_bad_trees_raise_one_clear_error():
    a, b = HostTensor(np.zeros((3, 4), np.float32)), HostTensor(np.zeros((2, 4), np.float32))
    with pytest.raises(codegen.OpTreeError, match=r"do not broadcast"):
        codegen.plan(a + b, a)
    with pytest.raises(codegen.OpTreeError, match=r"cannot be assigned"):
        codegen.plan(a * 2.0, HostTensor(np.zeros((3, 1), np.float32)))
    with pytest.raises(codegen.OpTreeError, match=r"out of range"):
        codegen.plan(OpNode("sum", a, axis=2), HostTensor(np.zeros((3, 1), np.float32)))
    with pytest.raises(TypeError, match=r"float64"):
        codegen.storage_code(np.float64)


# ---- the generated kernels, run on the host emulator --------------------------------------
def _cases(be, rng):
    x = rng.normal(size=(4, 5, 3)).astype(np.float32)
    y = rng.random((4, 5, 3)).astype(np.float32) + 0.5
    row, col = rng.normal(size=(1, 3)).astype(np.float32), rng.normal(size=(4, 1, 1)).astype(np.float32)
    odd = rng.normal(size=(1000003,)).astype(np.float32)
    wide = rng.normal(size=(3, 1001)).astype(np.float32)
    base = rng.normal(size=(6, 10, 7)).astype(np.float32)
    cases = [
        ("arith", lambda a, b: a * b + 2.0 - a / (be.absolute(b) + 1.0) ** 2, [x, y], x.shape),
        ("unary", lambda a, b: be.exp(a) + be.log(b) + be.sqrt(b) + be.rsqrt(b) + be.tanh(a)
         + be.sig(a) + be.sign(a) + be.square(a) + be.erf(a) - a, [x, y], x.shape),
        ("compare", lambda a, b: (a > b) + (a >= 0.0) * 2.0 + (a < b) * 3.0 + (a <= b)
         + (a == a) + (a != b), [x, y], x.shape),
        ("broadcast_row_col", lambda a, r, c: a * r + c, [x, row, col], x.shape),
        ("minmax", lambda a, b: be.maximum(a, b) - be.minimum(a, 0.0), [x, y], x.shape),
        ("softmax_bprop", lambda a, b: b * (a - be.sum(a * b, axis=-1)), [x, y], x.shape),
        ("centre_axis1", lambda a: a - be.max(a, axis=1), [x], x.shape),
        ("mean_of_expr", lambda a: be.mean(a * a + 1.0, axis=(1, 2)), [x], (4, 1, 1)),
        ("argmax1", lambda a: be.argmax(a, axis=1), [x], (4, 1, 3)),
        ("argmin0", lambda a: be.argmin(a, axis=0), [x], (1, 5, 3)),
        ("argmax_all", lambda a: be.argmax(a), [x], (1, 1, 1)),
        ("odd_size", lambda a: a * 0.5 + 1.0, [odd], odd.shape),
        ("odd_sum", lambda a: be.sum(a), [odd[:1000]], (1,)),
        ("size_one", lambda a: a + 1.0, [x[:1, :1, :1].copy()], (1, 1, 1)),
        ("wide_rows", lambda a: be.max(a, axis=1) + be.sum(a, axis=1), [wide], (3, 1)),
        ("wide_cols", lambda a: be.sum(a, axis=0), [wide], (1, 1001)),
        ("var_two_kernels", lambda a: be.var(a, axis=0), [x], (1, 5, 3)),
        ("var_all", lambda a: be.var(a), [x], (1, 1, 1)),
        ("broadcast_reduction", lambda a: a + be.sum(a, axis=0), [wide], wide.shape),
    ]
    for axis in (0, 1, 2, (0, 2), (1, 2), None):
        shape = tuple(1 if axis is None or i in np.atleast_1d(axis) else s
                      for i, s in enumerate(x.shape))
        for fn in ("sum", "max", "min", "mean"):
            cases.append((f"{fn}_{axis}", lambda a, fn=fn, axis=axis: getattr(be, fn)(a, axis=axis),
                          [x], shape))
    views = [("view_strided", lambda a: a * 3.0, base[:, ::3, 1:6], None),
             ("view_reduce", lambda a: be.sum(a, axis=1), base[1:5, ::2, ::3], "reduce1")]
    return cases, views


@requires("emulator")
def test_generated_kernels_match_cpu_on_host_emulator():
    be = _be()
    rng = np.random.default_rng(0)
    cases, views = _cases(be, rng)
    results = []

    def run(execute):
        for name, fn, arrays, shape in cases:
            out = HostTensor(np.full(shape, np.nan, np.float32))
            execute(out, fn(*[HostTensor(a) for a in arrays]))
            ref = np.zeros(shape, np.float32)
            evaluate(ref, fn(*[CPUTensor(be, a) for a in arrays]))
            results.append((name, out.ary, ref))
        for name, fn, view, kind in views:
            shape = view.shape if kind is None else (view.shape[0], 1, view.shape[2])
            big = np.full((shape[0] * 2,) + shape[1:], np.nan, np.float32)
            out = HostTensor(big[::2])
            execute(out, fn(HostTensor(view)))
            ref = np.zeros(shape, np.float32)
            evaluate(ref, fn(CPUTensor(be, view)))
            results.append((name, out.ary, ref))
            results.append((name + "_untouched", big[1::2], np.full_like(big[1::2], np.nan)))
        # in place, reading old values
        w = rng.normal(size=(3, 4)).astype(np.float32)
        tw = HostTensor(w.copy())
        execute(tw, tw - 0.1 * tw / (be.sqrt(tw * tw) + 1.0))
        results.append(("in_place", tw.ary, w - 0.1 * w / (np.sqrt(w * w) + 1.0)))

    EmulatedOpTrees(max_blocks=3).run(run)
    for name, got, want in results:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True,
                                   err_msg=f"generated kernel for {name!r}")


@requires("emulator")
def test_16_bit_storage_on_host_emulator():
    """float16 and bfloat16 tensors load as float32 and store rounded (bfloat16 to nearest even,
    as f32_to_bf16); raw uint16 state round-trips through the explicit conversions (Adam)."""
    be = _be()
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 7)).astype(np.float32)
    a_bf = f32_to_bf16(a)
    a16 = a.astype(np.float16)
    out = {}

    def run(execute):
        t_bf = HostTensor(a_bf, storage="bf16")
        out["bf16"] = HostTensor(np.zeros((5, 7), np.uint16), storage="bf16")
        execute(out["bf16"], t_bf * 3.0 + 1.0)
        out["f16"] = HostTensor(np.zeros((5, 7), np.float16))
        execute(out["f16"], HostTensor(a16) * 3.0 + 1.0)
        state = HostTensor(a_bf.copy())
        g = HostTensor(a)
        execute(state, be.f32_to_bf16(0.9 * be.bf16_to_f32(state) + 0.1 * g))
        out["state"] = state

    EmulatedOpTrees().run(run)
    want = bf16_to_f32(a_bf) * np.float32(3.0) + np.float32(1.0)
    assert np.array_equal(out["bf16"].ary, f32_to_bf16(want))
    np.testing.assert_array_equal(out["f16"].ary, (a16.astype(np.float32) * 3 + 1).astype(np.float16))
    expect = f32_to_bf16(np.float32(0.9) * bf16_to_f32(a_bf) + np.float32(0.1) * a)
    assert np.array_equal(out["state"].ary, expect)
