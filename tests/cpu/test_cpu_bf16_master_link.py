"""MixedPrecision's float32 masters linked to bf16 parameters on the CPU
(``backends/cpu/master_link.py``, ``kernels/cpu/fused_optim.c`` ``fused_update_linked``): a
step is one fused pass that reads the bf16 gradients and writes the bf16 parameters, with the
masters, states and copies bit for bit what widening, the float32 step and rounding to nearest
give, on 1, 2 and 3 threads; optimizers that update per parameter, and groups of both kinds,
still get the right gradients and copies; ``updated_finite`` still holds to its contract.

Bounds: the masters and states are compared exactly (the kernel performs the float32 rule's
operations in the same order on the exactly widened gradient); each bf16 copy is compared
exactly with the numpy reference's rounding of its master."""
import numpy as np
import pytest

import neonlite
from neonlite.backends.cpu.threads import openmp_threads, set_cpu_threads
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.layers import Bias, Linear, Parameter
from neonlite.optimizers import Adadelta, Adam, AdamW, GradientDescentMomentum, MultiOptimizer
from neonlite.optimizers.mixed_precision import MixedPrecision

#: odd sizes: not multiples of 16 (the arena's alignment), of the kernel's 2048-element block,
#: or of the threads' shares
SHAPES = [(7, 5), (3, 33), (1, 9), (67, 71), (2100,)]


@pytest.fixture
def be():
    previous = neonlite.backends._current
    yield neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype="bf16")
    neonlite.backends._current = previous


def _params(be, shapes=SHAPES, seed=0):
    """bf16 parameters (a Linear weight per shape; 1-D shapes a Bias) with bf16 gradients."""
    rng = np.random.default_rng(seed)
    params = []
    for k, shape in enumerate(shapes):
        layer = Bias(name=f"b{k}") if len(shape) == 1 else Linear(shape[-1], name=f"fc{k}")
        params.append(Parameter(layer, "W", be.array(rng.standard_normal(shape)),
                                be.zeros(shape)))
    return params


def _set_grads(params, step):
    rng = np.random.default_rng(100 + step)
    for p in params:
        p.grad.set(rng.standard_normal(p.value.shape) * 0.1)


def _float32_twins(params):
    """float32 parameters holding the bf16 parameters' values (a float32 backend's)."""
    be32 = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype=np.float32)
    twins = [Parameter(p.layer, p.name.split(".")[-1], be32.array(p.value.get()),
                       be32.zeros(p.value.shape)) for p in params]
    arena = be32.make_arena(twins)
    for t in twins:
        t.arena = arena
    return be32, twins


def _compare_with_float32(be, make_optimizer, steps=3):
    """Steps of MixedPrecision(make_optimizer()) on bf16 parameters against
    make_optimizer() on float32 twins given the same (widened) gradients."""
    params = _params(be)
    mixed = MixedPrecision(make_optimizer(), loss_scale=None)
    be32, twins = _float32_twins(params)
    plain = make_optimizer()
    for step in range(steps):
        _set_grads(params, step)
        for p, t in zip(params, twins):
            t.grad.set(p.grad.get())
        neonlite.backends._current = be
        mixed.optimize(params, 0)
        neonlite.backends._current = be32
        plain.optimize(twins, 0)
    neonlite.backends._current = be
    for p, t in zip(params, twins):
        master = p.states["master"].get()
        np.testing.assert_array_equal(master, t.value.get(), err_msg=p.name)
        for key in t.states:
            np.testing.assert_array_equal(p.states[key].get(), t.states[key].get(),
                                          err_msg=f"{p.name}/{key}")
        np.testing.assert_array_equal(p.value._ary, f32_to_bf16(master), err_msg=p.name)
    return mixed, params


def test_the_masters_arena_is_linked_and_the_step_runs_no_per_parameter_op(be, monkeypatch):
    params = _params(be)
    opt = MixedPrecision(AdamW(1e-3, weight_decay=0.1), loss_scale=None)
    _set_grads(params, 0)
    opt.optimize(params, 0)
    calls = []
    for name in ("execute", "execute_multi", "evaluate_into"):
        original = getattr(be, name)
        monkeypatch.setattr(be, name, lambda *a, _o=original, _n=name: calls.append(_n) or
                            _o(*a))
    _set_grads(params, 1)
    opt.optimize(params, 0)
    assert opt.masters(params)[0].arena.link is not None
    assert calls == [], f"a linked step ran per-parameter ops: {calls}"
    assert opt.updated_finite(params)


@pytest.mark.parametrize("make", [
    lambda: AdamW(1e-2, weight_decay=0.1, decay_exclude=["1d"]),
    lambda: Adam(1e-2, state_dtype="bf16"),
    lambda: GradientDescentMomentum(0.05, momentum_coef=0.9, wdecay=1e-3, nesterov=True),
    lambda: GradientDescentMomentum(0.05, gradient_clip_value=0.1),
], ids=["adamw_decay_groups", "adam_bf16_states", "nesterov_l2", "sgd_clip_value"])
def test_a_linked_step_is_the_float32_step_bit_for_bit(be, make):
    mixed, params = _compare_with_float32(be, make)
    assert mixed.updated_finite(params), "the linked pass checked what it wrote"


def test_per_parameter_and_mixed_groups_widen_their_gradients_once(be):
    """Adadelta has no fused form: it reads each master's gradient (widened in one call for
    all); a MultiOptimizer with a fused and a per-parameter group gets both right."""
    _compare_with_float32(be, lambda: Adadelta())
    mixed, params = _compare_with_float32(be, lambda: MultiOptimizer(
        {"default": Adam(1e-2), "Bias": Adadelta()}))
    assert not mixed.updated_finite(params), "a per-parameter group: the loop checks itself"


def test_global_norm_clipping_reads_the_bf16_gradients(be):
    """The clip scale is the same norm (sums of squares in double, in another order: the
    masters agree to float32 rounding)."""
    params = _params(be)
    mixed = MixedPrecision(Adam(1e-2, gradient_clip_norm=0.5), loss_scale=None)
    be32, twins = _float32_twins(params)
    plain = Adam(1e-2, gradient_clip_norm=0.5)
    _set_grads(params, 0)
    for p, t in zip(params, twins):
        t.grad.set(p.grad.get())
    neonlite.backends._current = be
    mixed.optimize(params, 0)
    neonlite.backends._current = be32
    plain.optimize(twins, 0)
    neonlite.backends._current = be
    for p, t in zip(params, twins):
        np.testing.assert_allclose(p.states["master"].get(), t.value.get(), rtol=1e-6,
                                   atol=1e-7)


def _steps_on_threads(be, threads, rounding):
    before = openmp_threads()
    set_cpu_threads(threads)
    try:
        params = _params(be, [(300, 301), (45000,)])
        opt = MixedPrecision(AdamW(1e-2, weight_decay=0.1), loss_scale=None,
                             rounding=rounding)
        for step in range(2):
            _set_grads(params, step)
            opt.optimize(params, 0)
        return [(p.value._ary.copy(), p.states["master"].get(), p.states["v"].get())
                for p in params]
    finally:
        set_cpu_threads(before)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_linked_steps_are_bit_identical_on_1_2_3_threads(be, rounding):
    first = _steps_on_threads(be, 1, rounding)
    for threads in (2, 3):
        for a, b in zip(first, _steps_on_threads(be, threads, rounding)):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y, err_msg=f"{threads} threads")


def test_a_master_beyond_the_bf16_range_makes_updated_finite_false(be):
    """3.3999e38 is a finite float32 that rounds to bf16 inf: the copy is checked."""
    params = _params(be, [(4, 3)])
    opt = MixedPrecision(GradientDescentMomentum(1.0), loss_scale=None)
    _set_grads(params, 0)
    opt.optimize(params, 0)
    assert opt.updated_finite(params)
    params[0].states["master"] = be.array(np.full((4, 3), 3.3999e38, np.float32),
                                          dtype=np.float32)
    params[0].grad.set(np.zeros((4, 3)))
    opt.optimize(params, 0)
    assert np.isfinite(params[0].states["master"].get()).all()
    assert np.isinf(bf16_to_f32(params[0].value._ary)).all()
    assert not opt.updated_finite(params)


def test_parameters_whose_arrays_moved_get_a_new_link(be):
    """A parameter rebound to another array (an arena of another owner would do it) is linked
    again: the next step reads and writes the new arrays."""
    params = _params(be, [(5, 3), (4,)])
    opt = MixedPrecision(GradientDescentMomentum(0.5), loss_scale=None, rounding="stochastic")
    _set_grads(params, 0)
    opt.optimize(params, 0)
    first = opt.masters(params)[0].arena.link
    for p in params:
        p.value._ary, p.grad._ary = p.value._ary.copy(), p.grad._ary.copy()
        p.grad.set(np.ones(p.value.shape))
    opt.optimize(params, 0)
    assert opt.masters(params)[0].arena.link is not first
    for p in params:
        master = p.states["master"].get()
        assert np.all(bf16_to_f32(p.value._ary) != 0.0) and np.isfinite(master).all()
        np.testing.assert_allclose(bf16_to_f32(p.value._ary), master, rtol=2 ** -7)
