"""Stochastic rounding of the bf16 weight copies (``MixedPrecision(rounding="stochastic")``,
``backends/shared/bf16_rounding.py``, ``kernels/cpu/bf16_stochastic.h``): unbiased in
expectation, exact values stay exact, NaN and inf as rounding to nearest makes them, the C
kernels' bits equal the numpy reference's (fused pass and the separate rounding pass), the
bits depend on the seed and the step and on nothing else (threads: see
``test_cpu_bf16_master_link.py``), and the option is refused where it cannot run.

Bounds: a stochastically rounded value lies within one bf16 ulp of its float32 value, and is
an unbiased sample, so its error has variance at most ulp^2 / 4; the mean of N independent
roundings is within 6 ulp / (2 sqrt(N)) of the value except with probability below 1e-8
per element (the hash gives fixed bits, so the test is deterministic; the bound says why it
holds)."""
import numpy as np
import pytest

import neonlite
from neonlite.backends.shared.bf16_rounding import (f32_to_bf16_stochastic, random_bits,
                                                    round_key)
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.layers import Linear, Parameter
from neonlite.optimizers import Adadelta, Adam, GradientDescentMomentum
from neonlite.optimizers.mixed_precision import MixedPrecision, for_datatype
from neonlite.optimizers.options import OptionError


@pytest.fixture
def be():
    previous = neonlite.backends._current
    yield neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype="bf16")
    neonlite.backends._current = previous


def _ulp(bits):
    """The spacing of bf16 numbers above each |value| of bf16 ``bits``."""
    magnitude = bits & np.uint16(0x7FFF)
    return bf16_to_f32(magnitude + np.uint16(1)) - bf16_to_f32(magnitude)


def test_the_mean_of_many_roundings_is_the_value():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1000) * 10.0 ** rng.integers(-6, 6, 1000)).astype(np.float32)
    n = 4096
    total = np.zeros(x.size)
    for step in range(n):
        total += bf16_to_f32(f32_to_bf16_stochastic(x, round_key(7, step, 0)))
    ulp = _ulp(f32_to_bf16(np.abs(x)))
    error = np.abs(total / n - x)
    assert np.all(error <= 6 * ulp / (2 * np.sqrt(n))), error.max()
    nearest = bf16_to_f32(f32_to_bf16(x))
    assert np.mean(np.abs(nearest - x)) > 5 * np.mean(error), "no better than nearest?"


def test_a_value_rounds_up_with_the_probability_of_its_low_bits():
    x = np.full(1 << 16, 1.0 + 3 * 2.0 ** -10, np.float32)  # 3/8 of the way to 1 + 2^-7
    up = bf16_to_f32(f32_to_bf16_stochastic(x, round_key(1, 2, 3))) > 1.0
    assert abs(up.mean() - 0.375) < 6 * np.sqrt(0.375 * 0.625 / x.size)


def test_exact_values_stay_exact_and_nan_and_inf_are_kept():
    exact = bf16_to_f32(np.arange(0, 1 << 16, 7, dtype=np.uint16))
    finite = np.isfinite(exact)
    for step in range(4):
        bits = f32_to_bf16_stochastic(exact, round_key(0, step, 1))
        np.testing.assert_array_equal(bits[finite], f32_to_bf16(exact[finite]))
    special = np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32)
    np.testing.assert_array_equal(f32_to_bf16_stochastic(special, round_key(0, 0, 0)),
                                  [0x7F80, 0xFF80, 0x7FC0, 0x7FC0])


def test_the_bits_are_a_hash_of_seed_step_parameter_and_element():
    keys = {round_key(s, t, k) for s in range(3) for t in range(3) for k in range(3)}
    assert len(keys) == 27
    a, b = random_bits(round_key(0, 0, 0), 5000), random_bits(round_key(0, 1, 0), 5000)
    assert a.max() < 1 << 16 and abs(a.mean() / 2 ** 16 - 0.5) < 0.02
    assert np.mean(a == b) < 0.01
    np.testing.assert_array_equal(random_bits(round_key(0, 0, 0), 10, 4990), a[4990:])


def _params(be, shapes):
    rng = np.random.default_rng(3)
    return [Parameter(Linear(s[-1], name=f"fc{k}"), "W", be.array(np.zeros(s)), be.zeros(s))
            for k, s in enumerate(shapes)], \
        [rng.standard_normal(s).astype(np.float32) * 0.01 for s in shapes]


@pytest.mark.parametrize("make", [lambda: GradientDescentMomentum(1e-3), lambda: Adadelta()],
                         ids=["fused_pass", "rounding_pass"])
def test_the_kernels_round_as_the_numpy_reference(be, make):
    """The copies equal the reference's rounding of the masters with the key of (seed, the
    step before the update, the parameter's place): SGD rounds in its fused pass, Adadelta
    (per parameter) leaves the copies to the separate pass."""
    params, starts = _params(be, [(37, 29), (3000,), (5,)])
    opt = MixedPrecision(make(), loss_scale=None, rounding="stochastic", rounding_seed=11)
    for p, start in zip(params, starts):
        p.states["master"] = be.array(start, dtype=np.float32)
    for step in range(3):
        for p in params:
            p.grad.set(np.full(p.value.shape, 0.5))
        opt.optimize(params, 0)
        for k, p in enumerate(params):
            master = p.states["master"].get()
            np.testing.assert_array_equal(
                p.value._ary, f32_to_bf16_stochastic(master, round_key(11, step, k)),
                err_msg=f"{p.name} at step {step}")


def test_stochastic_copies_keep_updates_that_rounding_to_nearest_loses(be):
    """1 + 1000 steps of 1e-4: nearest keeps every copy at 1.0 until the master has moved
    half a bf16 ulp (2^-8 ~ 0.0039) away; stochastic copies follow the master on average."""
    finals = {}
    for rounding in ("nearest", "stochastic"):
        params, _ = _params(be, [(64, 64)])
        params[0].value.set(np.ones((64, 64)))
        opt = MixedPrecision(GradientDescentMomentum(1e-4), loss_scale=None, rounding=rounding)
        for _ in range(30):
            params[0].grad.set(np.full((64, 64), -1.0))
            opt.optimize(params, 0)
        finals[rounding] = params[0].value.get().mean()
    assert finals["nearest"] == 1.0
    assert abs(finals["stochastic"] - (1.0 + 30e-4)) < 2e-4, finals


def test_bad_rounding_options_are_clear(be):
    sgd = GradientDescentMomentum(0.1)
    with pytest.raises(OptionError, match="rounding.*one of 'nearest', 'stochastic'"):
        MixedPrecision(sgd, loss_scale=None, rounding="up")
    with pytest.raises(OptionError, match="rounding.*loss scaling"):
        MixedPrecision(sgd, rounding="stochastic")
    with pytest.raises(OptionError, match="rounding_seed"):
        MixedPrecision(sgd, loss_scale=None, rounding_seed=-1)
    assert for_datatype(sgd, "bf16", "stochastic").rounding == "stochastic"


def test_stochastic_rounding_without_linked_masters_is_refused_before_the_step():
    previous = neonlite.backends._current
    be16 = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype=np.float16,
                                numpy_float16=True)
    try:
        p = Parameter(Linear(3, name="fc"), "W", be16.array(np.ones((2, 3))),
                      be16.zeros((2, 3)))
        opt = MixedPrecision(Adam(0.1), loss_scale=None, rounding="stochastic")
        p.grad.set(np.ones((2, 3)))
        with pytest.raises(ValueError, match="'stochastic' needs bfloat16 parameters"):
            opt.optimize([p], 0)
        assert opt.step == 0 and "m" not in p.states
        np.testing.assert_array_equal(p.value.get(), 1.0)
    finally:
        neonlite.backends._current = previous


def test_the_bf16_recipe_rounds_stochastically_where_the_masters_are_linked(be):
    """``-d bf16``'s default ("auto"): stochastic copies on the CPU backend, nearest where
    there is no link (numpy float16 here stands for any backend without one)."""
    params, starts = _params(be, [(9, 7)])
    opt = for_datatype(GradientDescentMomentum(1e-3), "bf16")
    assert opt.rounding == "auto"
    params[0].states["master"] = be.array(starts[0], dtype=np.float32)
    params[0].grad.set(np.zeros((9, 7)))
    opt.optimize(params, 0)
    np.testing.assert_array_equal(params[0].value._ary, f32_to_bf16_stochastic(
        params[0].states["master"].get(), round_key(0, 0, 0)))
    previous = neonlite.backends._current
    be16 = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype=np.float16,
                                numpy_float16=True)
    try:
        p = Parameter(Linear(3, name="fc"), "W", be16.array(np.ones((2, 3))),
                      be16.zeros((2, 3)))
        p.grad.set(np.ones((2, 3)))
        MixedPrecision(GradientDescentMomentum(1e-3), loss_scale=None,
                       rounding="auto").optimize([p], 0)
        np.testing.assert_array_equal(p.value.get(), np.float16(1.0 - 1e-3))
    finally:
        neonlite.backends._current = previous
