"""The parameter arena and the fused optimizer step (``neonlite/optimizers/arena.py``,
``fused.py``, ``kernels/cpu/fused_optim.c``): every optimizer's fused step over the arena gives
bit-identical parameters and states to its per-parameter op-tree update, in float32 and
float64, with schedules, decay, bfloat16 states, clipping by value, weight-decay groups and
MultiOptimizer groups; clipping by global norm agrees to rounding (its one-pass norm sums in
another order); zeroing is one fill; views, checkpoints' state tensors and get_params work."""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite import Model
from neonlite.layers import Affine, Embedding, GeneralizedCost, LayerNorm
from neonlite.optimizers import (Adagrad, Adam, AdamW, CosineSchedule, GradientDescentMomentum,
                                 MultiOptimizer, RMSProp)
from neonlite.transforms import CrossEntropyMulti, Softmax


class _Data:
    shape, target_shape, name = (6,), (6, 5), "arena"


def _model(dtype, arena=True):
    """An embedding, a layer norm and an affine head, initialized with seed 0."""
    be = make_backend("cpu", batch_size=3, seed=0, dtype=dtype)
    if not be.kernels.active(be.dtype):
        pytest.skip(f"the C kernels are unavailable: {be.kernels.unavailable_reason()}")
    model = Model([Embedding(11, 8, name="emb"), LayerNorm(name="ln"), Affine(9, name="fc"),
                   Affine(5, activation=Softmax(), name="head")])
    model.initialize(_Data(), GeneralizedCost(CrossEntropyMulti()))
    if not arena:
        model.arena = None
        for p in model.parameters():
            p.arena = None
    return model


def _run(make_opt, dtype, arena, steps=4):
    model = _model(dtype, arena)
    assert (model.arena is not None) == arena
    opt = make_opt()
    rng = np.random.default_rng(1)
    for step in range(steps):
        model.zero_grads()
        for p in model.parameters():
            p.grad.set(rng.normal(size=p.grad.shape) * (3.0 if step % 2 else 0.3))
        opt.optimize(model.parameters(), step)
    params = {p.name: p.value.get() for p in model.parameters()}
    states = {(p.name, k): t.get() for p in model.parameters() for k, t in p.states.items()}
    return params, states


CASES = {
    "sgd": lambda: GradientDescentMomentum(0.1),
    "sgd_wdecay": lambda: GradientDescentMomentum(0.1, wdecay=0.01),
    "momentum": lambda: GradientDescentMomentum(0.1, momentum_coef=0.9, wdecay=1e-3),
    "nesterov": lambda: GradientDescentMomentum(0.05, momentum_coef=0.8, nesterov=True,
                                                wdecay=1e-2, decay_exclude=["1d"]),
    "adam": lambda: Adam(1e-2),
    "adam_l2": lambda: Adam(1e-2, wdecay=0.05, gradient_clip_value=1.0),
    "adamw": lambda: AdamW(1e-2, beta_2=0.99, weight_decay=0.1,
                           schedule=CosineSchedule(10, 2, 0.1)),
    "adamw_groups": lambda: AdamW(1e-2, weight_decay=0.1, decay_exclude=["1d", "embeddings"]),
    "rmsprop": lambda: RMSProp(1e-2, gradient_clip_value=0.5),
    "adagrad": lambda: Adagrad(0.1),
    "multi": lambda: MultiOptimizer({"default": AdamW(1e-2, weight_decay=0.1),
                                     "LayerNorm": GradientDescentMomentum(0.1, 0.9),
                                     "emb": RMSProp(1e-3)}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_step_is_bit_identical_to_the_per_parameter_update(case, dtype):
    fused_params, fused_states = _run(CASES[case], dtype, arena=True)
    ref_params, ref_states = _run(CASES[case], dtype, arena=False)
    assert fused_states.keys() == ref_states.keys()
    for name, ref in ref_params.items():
        np.testing.assert_array_equal(fused_params[name], ref, err_msg=name)
    for key, ref in ref_states.items():
        np.testing.assert_array_equal(fused_states[key], ref, err_msg=str(key))


def test_bf16_adam_states_are_bit_identical():
    make = lambda: AdamW(1e-2, weight_decay=0.1, state_dtype="bf16")  # noqa: E731
    fused_params, fused_states = _run(make, np.float32, arena=True)
    ref_params, ref_states = _run(make, np.float32, arena=False)
    for name, ref in ref_params.items():
        np.testing.assert_array_equal(fused_params[name], ref, err_msg=name)
    for key, ref in ref_states.items():
        assert fused_states[key].dtype == np.uint16
        np.testing.assert_array_equal(fused_states[key], ref, err_msg=str(key))


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-5), (np.float64, 1e-12)],
                         ids=["f32", "f64"])
def test_global_norm_clipping_in_one_pass_matches(dtype, rtol):
    make = lambda: AdamW(1e-2, weight_decay=0.1, gradient_clip_norm=1.0)  # noqa: E731
    fused_params, _ = _run(make, dtype, arena=True)
    ref_params, _ = _run(make, dtype, arena=False)
    for name, ref in ref_params.items():
        np.testing.assert_allclose(fused_params[name], ref, rtol=rtol, atol=rtol * 1e-3,
                                   err_msg=name)


def test_parameters_are_views_of_the_arena_and_zeroing_is_one_fill():
    model = _model(np.float32)
    arena = model.arena
    buf = arena.values[np.dtype(np.float32)]
    for p in model.parameters():
        assert np.shares_memory(p.value._ary, buf)
        assert np.shares_memory(p.grad._ary, arena.grads[np.dtype(np.float32)])
        assert p.value._ary.ctypes.data % 64 == 0
        p.grad.set(np.ones(p.grad.shape))
    model.zero_grads()
    assert all(not p.grad.get().any() for p in model.parameters())
    assert arena.all_finite()
    p = model.parameters()[0]
    p.value[:] = np.inf
    assert not arena.all_finite()


def test_a_state_tensor_replaced_from_outside_is_adopted():
    """Loading a checkpoint assigns new tensors to ``param.states``; the next fused step takes
    their values into the arena and matches the per-parameter path."""
    results = []
    for arena in (True, False):
        model = _model(np.float64, arena)
        opt = Adam(1e-2)
        rng = np.random.default_rng(3)
        for p in model.parameters():
            p.grad.set(rng.normal(size=p.grad.shape))
        opt.optimize(model.parameters(), 0)
        be = model.be
        for p in model.parameters():
            p.states = {k: be.array(np.full(t.shape, 0.5), dtype=t.dtype)
                        for k, t in p.states.items()}
        opt.optimize(model.parameters(), 0)
        results.append({p.name: p.value.get() for p in model.parameters()})
        if arena:
            for p in model.parameters():
                assert np.shares_memory(p.states["m"]._ary,
                                        model.arena.state_buffer("m", np.float64))
    for name in results[1]:
        np.testing.assert_array_equal(results[0][name], results[1][name])


def test_an_optimizer_without_a_fused_form_runs_per_parameter():
    class PlainSGD(GradientDescentMomentum):
        def fused_form(self, lr):
            return None

    fused_params, _ = _run(lambda: PlainSGD(0.1, momentum_coef=0.9), np.float64, arena=True)
    ref_params, _ = _run(lambda: GradientDescentMomentum(0.1, momentum_coef=0.9), np.float64,
                         arena=False)
    for name, ref in ref_params.items():
        np.testing.assert_array_equal(fused_params[name], ref)


def test_a_fused_form_of_an_unknown_rule_is_one_clear_error():
    """The rule codes are the kernel header's (``NL_RULE_*`` of ``fused_optim.h``, read from
    the compiled module): a rule it lacks is one ValueError naming it and the known rules,
    before any parameter changes (it was a bare KeyError of a second table of the codes)."""
    class Unknown(GradientDescentMomentum):
        def fused_form(self, lr):
            form = super().fused_form(lr)
            form.rule = "lion"
            return form

    model = _model(np.float64)
    before = {p.name: p.value.get() for p in model.parameters()}
    with pytest.raises(ValueError, match=r"^fused optimizer step: no rule 'lion' in "
                                         r"kernels/cpu/fused_optim.h \(its rules: adagrad, "
                                         r"adam, adam_bf16, momentum, nesterov, rmsprop, "
                                         r"sgd\)$"):
        Unknown(0.1).optimize(model.parameters(), 0)
    for p in model.parameters():
        np.testing.assert_array_equal(p.value.get(), before[p.name])


def test_get_params_is_unchanged_by_the_arena():
    with_arena = _model(np.float64).get_params()
    without = _model(np.float64, arena=False).get_params()
    assert list(with_arena) == list(without)
    for name in without:
        np.testing.assert_array_equal(with_arena[name], without[name])
        assert with_arena[name].shape == without[name].shape


def test_decay_exclude_is_checked():
    with pytest.raises(ValueError, match="decay_exclude"):
        AdamW(1e-3, decay_exclude=["biases"])


def test_gradient_buckets_of_side_by_side_parameters_are_arena_views():
    """A data-parallel bucket whose parameters lie side by side in the arena allreduces the
    arena's own gradient run: no staging copy, the average taken in place."""
    from neonlite.distributed.buckets import HostBucket, plan_buckets
    model = _model(np.float32)
    params = list(reversed(model.parameters()))  # bprop order
    rng = np.random.default_rng(5)
    for p in params:
        p.grad.set(rng.normal(size=p.grad.shape))
    want = {p.name: p.grad.get() * 0.5 for p in params}
    bucket = HostBucket(0, plan_buckets(params, bucket_bytes=1 << 30)[0])
    assert bucket.in_arena
    assert np.shares_memory(bucket.buf, model.arena.grads[np.dtype(np.float32)])
    bucket.stage()
    bucket.unstage(0.5, in_place=True)
    for p in params:
        np.testing.assert_array_equal(p.grad.get(), want[p.name])
    apart = HostBucket(1, [params[0], params[2]])
    assert not apart.in_arena
