"""Each optimizer's update against its rule written out by hand (numpy, float64) for two steps,
on every available backend; schedules; MultiOptimizer routing; bfloat16 Adam state; Adadelta
against PyTorch."""
import math

import numpy as np
import pytest

import neonlite
from neonlite.layers import Bias, Convolution, Linear, Parameter
from neonlite.optimizers import (Adagrad, Adam, AdamW, CosineSchedule, GradientDescentMomentum,
                                 MultiOptimizer, PowerSchedule, RMSProp, StepSchedule)

SHAPES = [(3, 4), (4,)]


def make_params(be, layers=None, seed=0):
    """Two parameters with random values, plus per-step random gradients (host arrays)."""
    rng = np.random.default_rng(seed)
    layers = layers or [Linear(4, name="fc"), Bias(name="fc")]
    params, values = [], []
    for layer, shape, attr in zip(layers, SHAPES, ("W", "b")):
        w = rng.normal(size=shape)
        params.append(Parameter(layer, attr, be.array(w), be.zeros(shape)))
        values.append(w)
    grads = [[rng.normal(size=s) for s in SHAPES] for _ in range(2)]
    return params, values, grads


def run(be, optimizer, params, grads, epochs=(0, 0)):
    for step, epoch in enumerate(epochs):
        for p, g in zip(params, grads[step]):
            p.grad.set(g)
        optimizer.optimize(params, epoch)
    return [p.value.get() for p in params]


def check(got, want):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("wdecay", [0.0, 0.01])
def test_sgd_momentum(be, nesterov, wdecay):
    params, w, grads = make_params(be)
    lr, mu = 0.1, 0.9
    got = run(be, GradientDescentMomentum(lr, momentum_coef=mu, wdecay=wdecay, nesterov=nesterov),
              params, grads)
    want = []
    for i, w0 in enumerate(w):
        v = np.zeros_like(w0)
        for step in range(2):
            g = grads[step][i] + wdecay * w0
            v = mu * v - lr * g
            w0 = w0 + (mu * v - lr * g if nesterov else v)
        want.append(w0)
    check(got, want)


def test_sgd_plain_no_state(be):
    params, w, grads = make_params(be)
    got = run(be, GradientDescentMomentum(0.5), params, grads)
    check(got, [w[i] - 0.5 * grads[0][i] - 0.5 * grads[1][i] for i in range(2)])
    assert all(not p.states for p in params), "plain SGD keeps no velocity"


def test_gradient_clip_by_value(be):
    params, w, grads = make_params(be)
    lr, c, wd = 0.1, 0.5, 0.01
    got = run(be, GradientDescentMomentum(lr, wdecay=wd, gradient_clip_value=c), params, grads)
    want = []
    for i, w0 in enumerate(w):
        for step in range(2):
            w0 = w0 - lr * (np.clip(grads[step][i], -c, c) + wd * w0)
        want.append(w0)
    check(got, want)


@pytest.mark.parametrize("clip", [0.5, 100.0])
def test_gradient_clip_by_global_norm(be, clip):
    params, w, grads = make_params(be)
    lr = 0.1
    got = run(be, GradientDescentMomentum(lr, gradient_clip_norm=clip), params, grads)
    want = [w0.copy() for w0 in w]
    for step in range(2):
        norm = math.sqrt(sum(np.sum(g ** 2) for g in grads[step]))
        scale = min(1.0, clip / norm)
        want = [want[i] - lr * scale * grads[step][i] for i in range(2)]
    check(got, want)
    if clip < 1:
        delta = np.concatenate([(g - w0).ravel() for g, w0 in zip(got, w)])
        assert np.linalg.norm(delta) <= 2 * lr * clip * (1 + 1e-5)


def adam_rule(w0, grads, lr, b1, b2, eps, wdecay=0.0, weight_decay=0.0):
    """Kingma & Ba with bias correction; L2 ``wdecay`` in the gradient; decoupled (AdamW)
    ``weight_decay`` applied to the weights before the step."""
    m = v = np.zeros_like(w0)
    for t, g in enumerate(grads, start=1):
        g = g + wdecay * w0
        w0 = w0 - lr * weight_decay * w0
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        w0 = w0 - lr * mhat / (np.sqrt(vhat) + eps)
    return w0


@pytest.mark.parametrize("wdecay", [0.0, 0.1])
def test_adam(be, wdecay):
    params, w, grads = make_params(be)
    got = run(be, Adam(0.01, beta_1=0.8, beta_2=0.9, epsilon=1e-3, wdecay=wdecay), params, grads)
    check(got, [adam_rule(w[i], [grads[0][i], grads[1][i]], 0.01, 0.8, 0.9, 1e-3, wdecay=wdecay)
                for i in range(2)])


def test_adamw_decoupled_weight_decay(be):
    params, w, grads = make_params(be)
    got = run(be, AdamW(0.01, beta_1=0.8, beta_2=0.9, epsilon=1e-3, weight_decay=0.5), params,
              grads)
    want = [adam_rule(w[i], [grads[0][i], grads[1][i]], 0.01, 0.8, 0.9, 1e-3, weight_decay=0.5)
            for i in range(2)]
    check(got, want)
    coupled = [adam_rule(w[i], [grads[0][i], grads[1][i]], 0.01, 0.8, 0.9, 1e-3, wdecay=0.5)
               for i in range(2)]
    assert not np.allclose(want[0], coupled[0], rtol=1e-4), "the two decays must differ here"


def test_rmsprop(be):
    params, w, grads = make_params(be)
    lr, rho, eps = 0.01, 0.7, 1e-4
    got = run(be, RMSProp(lr, decay_rate=rho, epsilon=eps), params, grads)
    want = []
    for i, w0 in enumerate(w):
        s = np.zeros_like(w0)
        for step in range(2):
            g = grads[step][i]
            s = rho * s + (1 - rho) * g * g
            w0 = w0 - lr * g / (np.sqrt(s) + eps)
        want.append(w0)
    check(got, want)


def test_adagrad(be):
    params, w, grads = make_params(be)
    lr, eps = 0.1, 1e-6
    got = run(be, Adagrad(lr, epsilon=eps), params, grads)
    want = []
    for i, w0 in enumerate(w):
        s = np.zeros_like(w0)
        for step in range(2):
            g = grads[step][i]
            s = s + g * g
            w0 = w0 - lr * g / (np.sqrt(s) + eps)
        want.append(w0)
    check(got, want)


# ---- learning-rate schedules --------------------------------------------------------------------
def test_step_schedule():
    listed = StepSchedule([2, 5], change=0.1)
    assert [listed.rate(1.0, e, 0) for e in (0, 1, 2, 4, 5, 9)] == pytest.approx(
        [1, 1, 0.1, 0.1, 0.01, 0.01])
    every = StepSchedule(3, change=0.5)
    assert [every.rate(2.0, e, 0) for e in (0, 2, 3, 6, 7)] == pytest.approx([2, 2, 1, 0.5, 0.5])


def test_power_schedule():
    sched = PowerSchedule(gamma=0.1, power=0.75)
    for step in (0, 1, 10, 100):
        assert sched.rate(0.5, 0, step) == pytest.approx(0.5 * (1 + 0.1 * step) ** -0.75)


def test_cosine_schedule_with_warmup():
    sched = CosineSchedule(total_steps=12, warmup_steps=2, min_ratio=0.1)
    rates = [sched.rate(1.0, 0, s) for s in range(14)]
    assert rates[:2] == pytest.approx([0.5, 1.0])
    for s in range(2, 14):
        progress = min(1.0, (s - 2) / 10)
        assert rates[s] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
    assert rates[12] == pytest.approx(0.1) and rates[13] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="total_steps"):
        CosineSchedule(total_steps=3, warmup_steps=3)


def test_optimizer_follows_step_and_epoch_schedules(be):
    params, w, grads = make_params(be)
    got = run(be, GradientDescentMomentum(1.0, schedule=CosineSchedule(4, warmup_steps=2)),
              params, grads)
    check(got, [w[i] - 0.5 * grads[0][i] - 1.0 * grads[1][i] for i in range(2)])
    params, w, grads = make_params(be)
    got = run(be, RMSProp(0.1, decay_rate=0.5, epsilon=1e-6,
                          schedule=StepSchedule([1], change=0.1)), params, grads, epochs=(0, 1))
    s1 = [0.5 * grads[0][i] ** 2 for i in range(2)]
    s2 = [0.5 * s1[i] + 0.5 * grads[1][i] ** 2 for i in range(2)]
    check(got, [w[i] - 0.1 * grads[0][i] / (np.sqrt(s1[i]) + 1e-6)
                - 0.01 * grads[1][i] / (np.sqrt(s2[i]) + 1e-6) for i in range(2)])


# ---- MultiOptimizer -----------------------------------------------------------------------------
def test_multi_optimizer_routes_by_name_then_type(be):
    rng = np.random.default_rng(1)
    layers = [Linear(4, name="fc1"), Bias(name="fc1"), Linear(4, name="fc_out"),
              Bias(name="fc_out"), Convolution((1, 1, 4), name="conv")]
    params = []
    for layer, attr in zip(layers, ("W", "b", "W", "b", "W")):
        params.append(Parameter(layer, attr, be.array(rng.normal(size=(4,))), be.zeros((4,))))
    before = [p.value.get() for p in params]
    g = rng.normal(size=(4,))
    for p in params:
        p.grad.set(g)
    default, bias_opt, named = (GradientDescentMomentum(0.1), GradientDescentMomentum(1.0),
                                Adam(0.01))
    multi = MultiOptimizer({"default": default, "Bias": bias_opt, "fc_out": named})
    assert [multi.optimizer_for(p) for p in params] == [default, bias_opt, named, named, default]
    multi.optimize(params, 0)
    after = [p.value.get() for p in params]
    check([after[0], after[4]], [before[0] - 0.1 * g, before[4] - 0.1 * g])
    check([after[1]], [before[1] - 1.0 * g])
    for i in (2, 3):
        check([after[i]], [adam_rule(before[i], [g], 0.01, 0.9, 0.999, 1e-8)])
    assert (default.step, bias_opt.step, named.step) == (1, 1, 1)
    with pytest.raises(ValueError, match="default"):
        MultiOptimizer({"Bias": bias_opt})


# ---- bfloat16 Adam state ------------------------------------------------------------------------
def test_adam_bf16_state_is_two_bytes_and_tracks_fp32(be):
    """Each step rounds m and v to bfloat16 once (relative error <= 2**-8), so after t steps
    |m_bf16 - m_fp32| <= 2**-8 * sum_k |m_k| elementwise (likewise v), and the weights differ
    by a few bf16 ulps of the per-step update lr."""
    steps, lr = 6, 1e-3
    params = {dtype: make_params(be, seed=2)[0] for dtype in ("f32", "bf16")}
    opts = {dtype: Adam(lr, state_dtype=dtype) for dtype in params}
    rng = np.random.default_rng(3)
    bound = {key: [np.zeros(s) for s in SHAPES] for key in ("m", "v")}
    for _ in range(steps):
        grads = [rng.normal(size=s) for s in SHAPES]
        for dtype in params:
            for p, g in zip(params[dtype], grads):
                p.grad.set(g)
            opts[dtype].optimize(params[dtype], 0)
        for key in bound:
            for i, p in enumerate(params["f32"]):
                bound[key][i] += 2.0 ** -8 * np.abs(p.states[key].get()) * (1 + 2.0 ** -7)
    for i, (p32, p16) in enumerate(zip(params["f32"], params["bf16"])):
        for key in ("m", "v"):
            state = p16.states[key]
            assert state.dtype == np.uint16
            host = state.get()
            assert host.dtype == np.uint16 and host.nbytes == 2 * state.size
            assert p32.states[key].dtype == np.float32
            widened = (host.astype(np.uint32) << 16).view(np.float32)
            error = np.abs(widened - p32.states[key].get())
            assert np.all(error <= bound[key][i] + 1e-12), f"{key}: {error.max()}"
        delta = np.abs(p16.value.get() - p32.value.get())
        assert delta.max() <= steps * lr * 2.0 ** -6
        assert delta.max() > 0, "the bf16 run must really round its state"


def test_adam_bf16_first_step_is_rounded_nearest_even(be):
    params, w, grads = make_params(be, seed=4)
    opt = Adam(1e-3, beta_1=0.9, state_dtype="bf16")
    for p, g in zip(params, grads[0]):
        p.grad.set(g)
    opt.optimize(params, 0)
    for p, g in zip(params, grads[0]):
        m32 = np.float32(1.0 - 0.9) * g.astype(np.float32)
        bits = m32.view(np.uint32).astype(np.uint64)
        want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        assert np.array_equal(p.states["m"].get(), want)


def test_adadelta_matches_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is needed for the parity test")
    from neonlite.layers import Parameter
    from neonlite.optimizers import Adadelta
    be = neonlite.gen_backend("cpu", batch_size=1, datatype=np.float64)
    rng = np.random.default_rng(6)
    w0 = rng.normal(size=(3, 4))
    param = Parameter(type("L", (), {"name": "p"})(), "W", be.array(w0), be.zeros((3, 4)))
    opt = Adadelta(decay=0.9, epsilon=1e-6, learning_rate=0.5)
    wt = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.Adadelta([wt], lr=0.5, rho=0.9, eps=1e-6)
    for step in range(5):
        g = rng.normal(size=(3, 4))
        param.grad.set(g)
        opt.optimize([param], 0)
        wt.grad = torch.tensor(g)
        topt.step()
        np.testing.assert_allclose(param.value.get(), wt.detach().numpy(), rtol=0, atol=1e-12)
