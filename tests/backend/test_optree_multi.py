"""Multi-output op-trees: several ``out[:] = tree`` assignments in one pass over memory.

``be.execute_multi([(v, ...), (w, ...)])`` must equal running the assignments one by one (a
tree that reads an earlier output reads its new value; one that reads a later output reads its
old value), on the CPU's C machine (one call, every tensor read and written once) and in the
generated CUDA kernel (run on the host emulator, compiled with nvcc where it is installed).
Every optimizer step is one such call per parameter.
"""
import subprocess

import numpy as np
import pytest
from support.gpu_host_tensors import EmulatedOpTrees, HostTensor
from support.requires import requires

import neonlite
from neonlite.backends.gpu import codegen
from neonlite.backends.reference.optree import evaluate
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.optimizers import (Adagrad, Adam, AdamW, GradientDescentMomentum, RMSProp)

DTYPES = (np.float32, np.float64)


def _steps(be, t):
    """(name, assignments) over tensors ``t`` (a dict): optimizer steps and odd orders."""
    w, v, m, g, b = t["w"], t["v"], t["m"], t["g"], t["bias"]
    return [
        ("sgd_momentum", [(v, 0.9 * v - 0.01 * (g + 1e-4 * w)), (w, w + v)]),
        ("nesterov", [(v, 0.9 * v - 0.01 * g), (w, w + 0.9 * v - 0.01 * g)]),
        ("adam", [(m, 0.9 * m + 0.1 * g), (v, 0.999 * v + 0.001 * be.square(g)),
                  (w, w * 0.99 - 0.001 * m / (be.sqrt(v) * 1.5 + 1e-8))]),
        ("reads_old_later_output", [(m, v * 2.0), (v, m + v), (w, m - v)]),
        ("broadcast_bias", [(m, g + b), (v, be.maximum(m, 0.0) * b)]),
    ]


def _tensors(rng, make, dtype, shape=(37, 130)):
    arrays = {k: rng.standard_normal(shape).astype(dtype) for k in ("w", "v", "m", "g")}
    arrays["v"] = np.abs(arrays["v"])
    arrays["bias"] = rng.standard_normal(shape[-1:]).astype(dtype)
    return arrays, {k: make(a) for k, a in arrays.items()}


@pytest.fixture(scope="module")
def machine_be():
    be = neonlite.gen_backend("cpu", batch_size=4)
    if not be.kernels.active(np.float32):
        pytest.skip(f"the C kernels are not built here: {be.kernels.unavailable_reason()}")
    return be


STEPS = ("sgd_momentum", "nesterov", "adam", "reads_old_later_output", "broadcast_bias")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", STEPS)
def test_cpu_machine_runs_a_step_in_one_pass_like_numpy_one_by_one(machine_be, name, dtype):
    be = machine_be
    _, fused = _tensors(np.random.default_rng(1), lambda a: be.array(a, dtype=dtype), dtype)
    _, plain = _tensors(np.random.default_rng(1), lambda a: be.array(a, dtype=dtype), dtype)
    step = dict(_steps(be, fused))[name]
    assert be._machine.run_multi([(out._ary, tree) for out, tree in step])
    for out, tree in dict(_steps(be, plain))[name]:
        evaluate(out._ary, tree)
    for key in fused:
        np.testing.assert_allclose(fused[key].get(), plain[key].get(),
                                   rtol=1e-6 if dtype == np.float32 else 1e-13,
                                   err_msg=f"{name}: {key}")


def test_cpu_machine_strided_outputs_and_declines(machine_be):
    be = machine_be
    rng = np.random.default_rng(2)
    big = np.zeros((10, 24), np.float32)
    a = be.array(rng.standard_normal((10, 12)))
    out1 = be.array(np.zeros((10, 12)))
    view = big[:, ::2]
    assert be._machine.run_multi([(out1._ary, a * 2.0), (view, out1 + a)])
    np.testing.assert_allclose(view, 3.0 * a.get(), rtol=1e-6)
    assert not big[:, 1::2].any()
    w = be.array(rng.standard_normal((10, 12)))
    before = w.get()
    # the same output twice, outputs of different shapes, a reduction: nothing is written
    assert not be._machine.run_multi([(w._ary, w * 2.0), (w._ary, w + 1.0)])
    assert not be._machine.run_multi([(w._ary, w * 2.0), (a._ary[:5], a[:5] + 1.0)])
    assert not be._machine.run_multi([(w._ary, w * 2.0), (a._ary, a - be.sum(a, axis=1))])
    np.testing.assert_array_equal(w.get(), before)
    # the backend then runs them one by one, with the same meaning
    be.execute_multi([(w, w * 2.0), (w, w + 1.0)])
    np.testing.assert_allclose(w.get(), before * 2.0 + 1.0, rtol=1e-6)
    be.execute_multi([(w, w * 0.5), (a, a - be.sum(w, axis=1))])
    np.testing.assert_allclose(w.get(), before + 0.5, rtol=1e-6)


OPTIMIZERS = [
    ("sgd_momentum", lambda: GradientDescentMomentum(0.01, momentum_coef=0.9, wdecay=1e-4)),
    ("nesterov", lambda: GradientDescentMomentum(0.01, momentum_coef=0.9, nesterov=True)),
    ("adam", lambda: Adam(1e-3, wdecay=1e-4)),
    ("adamw", lambda: AdamW(1e-3)),
    ("rmsprop", lambda: RMSProp()),
    ("adagrad", lambda: Adagrad()),
]


class _Param:
    def __init__(self, be, w, g):
        self.value, self.grad, self.states, self.layer = be.array(w), be.array(g), {}, None


@pytest.mark.parametrize("name,make", OPTIMIZERS, ids=[n for n, _ in OPTIMIZERS])
def test_every_optimizer_step_is_one_fused_pass(machine_be, monkeypatch, name, make):
    be = machine_be
    calls = {"multi": 0, "fused": 0, "single": 0}
    run_multi, evaluate_one = type(be._machine).run_multi, type(be).evaluate_into

    def counting_run_multi(machine, assignments, reductions_ok=False):
        done = run_multi(machine, assignments, reductions_ok)
        if len(assignments) > 1:
            calls["multi"] += 1
            calls["fused"] += done
        return done

    def counting_evaluate(self, out, tree, *rest):
        calls["single"] += 1
        return evaluate_one(self, out, tree, *rest)

    monkeypatch.setattr(type(be._machine), "run_multi", counting_run_multi)
    monkeypatch.setattr(type(be), "evaluate_into", counting_evaluate)
    rng = np.random.default_rng(3)
    params = [_Param(be, rng.standard_normal(s), rng.standard_normal(s))
              for s in ((20, 30), (30,))]
    opt = make()
    opt.optimize(params, epoch=0)  # makes the zero states
    calls.update(multi=0, fused=0, single=0)
    opt.optimize(params, epoch=0)
    assert calls == {"multi": 2, "fused": 2, "single": 0}


# ---- the generated CUDA kernels ------------------------------------------------------------
def _host_steps(be):
    rng = np.random.default_rng(4)
    arrays, tensors = _tensors(rng, HostTensor, np.float32, shape=(7, 45))
    return arrays, tensors, _steps(be, tensors)


@requires("emulator")
def test_generated_multi_output_kernels_match_cpu_on_host_emulator():
    be = neonlite.gen_backend("cpu", batch_size=1)
    for name in STEPS:
        arrays, tensors, steps = _host_steps(be)
        cpu = {k: be.array(a) for k, a in arrays.items()}
        emulated = EmulatedOpTrees(max_blocks=2)
        emulated.run(lambda execute: emulated.executor.execute_multi(dict(steps)[name]))
        assert len(emulated.launches) == 1, f"{name}: one kernel"
        be.execute_multi(dict(_steps(be, cpu))[name])
        for key, t in tensors.items():
            np.testing.assert_allclose(t.ary, cpu[key].get(), rtol=2e-5, atol=2e-6,
                                       err_msg=f"{name}: {key}")


@requires("emulator")
def test_generated_multi_output_kernel_reads_stored_bf16_and_views():
    """A later tree reads an earlier output as stored: bfloat16 state rounded, then used; a
    strided output view leaves the elements between its own untouched."""
    rng = np.random.default_rng(5)
    g = rng.standard_normal((6, 9)).astype(np.float32)
    m0 = f32_to_bf16(rng.standard_normal((6, 9)).astype(np.float32))
    w0 = rng.standard_normal((6, 18)).astype(np.float32)
    full = w0.copy()
    m, tg, w = HostTensor(m0.copy(), storage="bf16"), HostTensor(g), HostTensor(full[:, ::2])
    emulated = EmulatedOpTrees()
    emulated.run(lambda execute: emulated.executor.execute_multi(
        [(m, 0.9 * m + 0.1 * tg), (w, w - 0.5 * m)]))
    m_want = f32_to_bf16(np.float32(0.9) * bf16_to_f32(m0) + np.float32(0.1) * g)
    np.testing.assert_array_equal(m.ary, m_want)
    np.testing.assert_allclose(full[:, ::2], w0[:, ::2] - 0.5 * bf16_to_f32(m_want), rtol=1e-6)
    np.testing.assert_array_equal(full[:, 1::2], w0[:, 1::2])


@requires("emulator")
def test_executor_reuses_the_multi_output_kernel_for_new_tensors_and_rates():
    rng = np.random.default_rng(6)
    params = [{k: rng.standard_normal((5, 8)).astype(np.float32) for k in "wvg"}
              for _ in range(2)]
    want = []
    for p, lr in zip(params, (0.1, 0.2)):
        v = 0.9 * p["v"] - np.float32(lr) * p["g"]
        want.append((v, p["w"] + v))
    tensors = [{k: HostTensor(a.copy()) for k, a in p.items()} for p in params]
    emulated = EmulatedOpTrees()

    def run(execute):
        for t, lr in zip(tensors, (0.1, 0.2)):
            emulated.executor.execute_multi([(t["v"], 0.9 * t["v"] - lr * t["g"]),
                                             (t["w"], t["w"] + t["v"])])
    emulated.run(run)
    assert emulated.executor.compiles == 1 and len(emulated.launches) == 2
    for t, (v, w) in zip(tensors, want):
        np.testing.assert_allclose(t["v"].ary, v, rtol=1e-6)
        np.testing.assert_allclose(t["w"].ary, w, rtol=1e-6)


def test_multi_output_plans_reuse_kernels_and_refuse_what_they_cannot_fuse():
    be = neonlite.gen_backend("cpu", batch_size=1)
    _, t, _ = _host_steps(be)
    w, v, g = t["w"], t["v"], t["g"]
    plans = [codegen.plan_multi([(v, 0.9 * v - lr * g), (w, w + v)]) for lr in (0.1, 0.2)]
    assert plans[0].key == plans[1].key and plans[0].source() == plans[1].source()
    assert plans[0].scalars == (0.9, 0.1) and plans[1].scalars == (0.9, 0.2)
    assert plans[0].arg_format.count("P") == 4  # v, w, then the leaves v (old) and g
    other = codegen.plan_multi([(v, 0.9 * v - 0.1 * g), (w, w - v)])
    assert other.key != plans[0].key
    with pytest.raises(codegen.OpTreeError, match="share one shape"):
        codegen.plan_multi([(v, v * 2.0), (HostTensor(np.zeros((3,), np.float32)), g * 1.0)])
    with pytest.raises(codegen.OpTreeError, match="reduction"):
        codegen.plan_multi([(v, v * 2.0), (w, w - be.sum(v, axis=0))])


@requires("nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_multi_output_sources_compile_with_nvcc(arch, tmp_path):
    be = neonlite.gen_backend("cpu", batch_size=1)
    _, _, steps = _host_steps(be)
    m16 = HostTensor(np.zeros((7, 45), np.uint16), storage="bf16")
    h16 = HostTensor(np.zeros((7, 45), np.float16))
    g = HostTensor(np.zeros((7, 45), np.float32))
    steps.append(("bf16_f16", [(m16, 0.9 * m16 + 0.1 * g), (h16, h16 - m16)]))
    bodies = [codegen.plan_multi(step).source()[1].split(codegen.BODY_MARKER, 1)[1]
              for _, step in steps]
    cu = tmp_path / "multi.cu"
    cu.write_text(codegen.common_header() + "\n".join(bodies))
    result = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-o",
                             str(tmp_path / "multi.cubin"), str(cu)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
