"""MixedPrecision (float32 master weights, dynamic loss scaling) on the CPU backend with numpy
float16 storage: master weights keep updates that float16 rounds away; an overflowing step is
skipped (parameters and optimizer state untouched), the scale backs off and the skip is counted
and logged; the scale grows after ``growth_interval`` good steps; bfloat16 mode scales nothing;
a small float16 model trains like its float32 twin."""
import logging

import numpy as np
import pytest

import neonlite
from neonlite.data import ArrayIterator
from neonlite.initializers import GlorotUniform
from neonlite.layers import Affine, GeneralizedCost, Linear, Parameter
from neonlite.optimizers import Adam, GradientDescentMomentum
from neonlite.optimizers.mixed_precision import MixedPrecision, for_datatype
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax


@pytest.fixture
def be16():
    previous = neonlite.backends._current
    yield neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype=np.float16,
                               numpy_float16=True)
    neonlite.backends._current = previous


def _param(be, value):
    value = np.asarray(value, dtype=np.float32)
    return Parameter(Linear(value.shape[-1], name="fc"), "W", be.array(value),
                     be.zeros(value.shape))


def test_master_weights_keep_updates_float16_rounds_away(be16):
    p = _param(be16, np.ones((2, 3)))
    opt = MixedPrecision(GradientDescentMomentum(1e-4), loss_scale=None)
    for _ in range(100):
        p.grad.set(np.ones((2, 3)))
        opt.optimize([p], 0)
    assert p.value.dtype == np.float16
    master = p.states["master"]
    assert master.dtype == np.float32
    np.testing.assert_allclose(master.get(), 1.0 - 100 * 1e-4, rtol=1e-5)
    np.testing.assert_allclose(p.value.get(), np.float16(1.0 - 100 * 1e-4), rtol=0)
    plain = _param(be16, np.ones((2, 3)))
    for _ in range(100):
        plain.grad.set(np.ones((2, 3)))
        GradientDescentMomentum(1e-4).optimize([plain], 0)
    assert np.all(plain.value.get() == 1.0), "float16 alone should lose these updates"


@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")
def test_overflow_skips_the_step_and_lowers_the_scale(be16, caplog):
    p = _param(be16, [[0.5, -0.25]])
    opt = MixedPrecision(Adam(0.1), init_scale=1024.0, growth_interval=3)
    p.grad.set([[4.0, 2.0]])
    opt.optimize([p], 0)
    assert opt.step == 1 and opt.skipped_steps == 0
    m_before, master_before = p.states["m"].get(), p.states["master"].get()
    assert p.states["m"].dtype == np.float32, "optimizer state must be float32"
    value_before = p.value.get()
    p.grad.set([[np.inf, 1.0]])
    with caplog.at_level(logging.WARNING, logger="neonlite.mixed_precision"):
        opt.optimize([p], 0)
    assert opt.skipped_steps == 1 and opt.loss_scale == 512.0 and opt.step == 1
    assert "step skipped (1 skipped so far); loss scale 1024 -> 512" in caplog.text
    np.testing.assert_array_equal(p.value.get(), value_before)
    np.testing.assert_array_equal(p.states["m"].get(), m_before)
    np.testing.assert_array_equal(p.states["master"].get(), master_before)
    p.grad.set([[np.nan, 1.0]])
    opt.optimize([p], 0)
    assert opt.skipped_steps == 2 and opt.loss_scale == 256.0
    for _ in range(3):
        p.grad.set([[256.0, 256.0]])
        opt.optimize([p], 0)
    assert opt.step == 4 and opt.loss_scale == 512.0 and opt.good_steps == 0
    # the unscaled gradient (256 / 256 = 1) is what Adam saw
    want_m = 0.9 ** 3 * m_before[0, 1] + (1 - 0.9 ** 3)
    np.testing.assert_allclose(p.states["m"].get()[0, 1], want_m, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")
def test_scaled_cost_overflows_float16_then_recovers(be16):
    """A loss scale of 2**20 makes float16 errors overflow: the first steps are skipped
    until the scale is small enough, then training proceeds."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 10)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    data = ArrayIterator(X, y, nclass=3, shuffle=False)
    model = neonlite.Model([Affine(nout=3, init=GlorotUniform(), activation=Softmax())])
    opt = MixedPrecision(GradientDescentMomentum(0.1), init_scale=2.0 ** 20)
    cost = opt.wrap_cost(GeneralizedCost(CrossEntropyMulti()))
    model.initialize(data, cost)
    losses = []
    for x, t in data.batches(shuffle=False):
        losses.append(model.train_step(x, t, opt, 0))
    assert opt.skipped_steps >= 4, f"expected float16 overflow at scale 2**20, scales {opt}"
    assert opt.loss_scale <= 2.0 ** 16
    assert opt.step == len(losses) - opt.skipped_steps > 0
    assert all(np.isfinite(losses))


def _train(datatype, steps=30):
    previous = neonlite.backends._current
    try:
        neonlite.gen_backend("cpu", batch_size=16, rng_seed=1,
                             datatype={"f16": np.float16, "f32": np.float32}[datatype],
                             numpy_float16=True)
        rng = np.random.default_rng(2)
        centers = rng.normal(size=(3, 12)) * 2.0
        y = rng.integers(0, 3, 16 * steps)
        X = (centers[y] + rng.normal(size=(y.size, 12))).astype(np.float32)
        data = ArrayIterator(X, y, nclass=3, shuffle=False)
        model = neonlite.Model([Affine(nout=16, init=GlorotUniform(), activation=Rectlin()),
                                Affine(nout=3, init=GlorotUniform(), activation=Softmax())])
        opt = for_datatype(GradientDescentMomentum(0.05, momentum_coef=0.9), datatype)
        cost = GeneralizedCost(CrossEntropyMulti())
        cost = opt.wrap_cost(cost) if isinstance(opt, MixedPrecision) else cost
        model.initialize(data, cost)
        return np.array([model.train_step(x, t, opt, 0) for x, t in data.batches(shuffle=False)])
    finally:
        neonlite.backends._current = previous


def test_float16_training_follows_float32():
    f32, f16 = _train("f32"), _train("f16")
    assert f16[-5:].mean() < 0.5 * f16[:5].mean()
    np.testing.assert_allclose(f16, f32, rtol=0.05, atol=0.02)


def test_bf16_mode_has_no_loss_scale_and_bad_arguments_are_clear(be16):
    opt = for_datatype(GradientDescentMomentum(0.1), "bf16")
    assert opt.loss_scale == 1.0 and not opt.check_overflow
    assert for_datatype(opt.optimizer, "f32") is opt.optimizer
    state = MixedPrecision(GradientDescentMomentum(0.1), init_scale=8.0).state_dict()
    assert state["loss_scale"] == 8.0 and state["step"] == 0
    with pytest.raises(ValueError, match="loss_scale must be 'dynamic', a finite number > 0"):
        MixedPrecision(GradientDescentMomentum(0.1), loss_scale=-1)


def test_f16_trains_with_master_weights_and_saves_the_loss_scale(tmp_path):
    """The run the CLI makes for ``-d f16`` (which it refuses on the CPU: the CPU backend's
    float16 is this numpy reference), through the Python API, saved to a checkpoint."""
    from neonlite.cli.session import initialize, load_data
    from neonlite.config.run import RunConfig
    from neonlite.serialize import read_checkpoint
    run = RunConfig.from_text(
        "epochs: 1\nbatchsize: 16\nrng_seed: 0\n"
        "dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, nvalid: 32}}\n"
        "layers:\n"
        "  - {type: Conv, config: {fshape: [3, 3, 4], padding: 1, activation: {type: Rectlin}}}\n"
        "  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}\n"
        "cost: CrossEntropyMulti\n"
        "optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.1}}\n", "run")
    ckpt = tmp_path / "c.h5"
    previous = neonlite.backends._current
    try:
        neonlite.gen_backend("cpu", batch_size=16, rng_seed=0, datatype=np.float16,
                             numpy_float16=True)
        _, train, _ = load_data(run.settings, None, valid=False)
        model, opt = run.build_model(), for_datatype(run.build_optimizer(), "f16")
        cost = opt.wrap_cost(run.build_cost())
        initialize(model, train, cost)
        model.fit(train, opt, 1, cost, progress=False)
        model.save(ckpt)
    finally:
        neonlite.backends._current = previous
    saved = read_checkpoint(str(ckpt))
    assert saved.optimizer_state["default"]["loss_scale"] == 2.0 ** 15
    masters = {name: keys["master"] for name, keys in saved.states.items()}
    assert masters and all(m.dtype == np.float32 for m in masters.values())


def _model_params(be, shapes, seed=0):
    """Parameters of the given shapes, with values and gradients exactly representable in
    float16, in the backend's arena (as a model makes them)."""
    rng = np.random.default_rng(seed)
    params = []
    for k, shape in enumerate(shapes):
        p = Parameter(Linear(shape[-1], name=f"fc{k}"), "W",
                      be.array(rng.standard_normal(shape).astype(np.float16)),
                      be.zeros(shape))
        params.append(p)
    arena = be.make_arena(params)
    for p in params:
        p.arena = arena
    return params


def _set_grads(params, step):
    rng = np.random.default_rng(100 + step)
    for p in params:
        p.grad.set(rng.standard_normal(p.value.shape).astype(np.float16))


SHAPES = [(7, 5), (3, 33), (1, 9)]


def test_masters_step_exactly_as_float32_does_in_one_arena(be16):
    """The wrapped Adam updates the float32 masters exactly as plain Adam updates float32
    parameters with the same gradients; the masters, their gradients and Adam's states live
    in one arena, so the step is the arena's fused pass."""
    mixed = _model_params(be16, SHAPES)
    opt = MixedPrecision(Adam(0.01, weight_decay=0.1), loss_scale=None)
    for step in range(3):
        _set_grads(mixed, step)
        opt.optimize(mixed, 0)
    masters = [p.states["master"] for p in mixed]
    assert all(m.dtype == np.float32 for m in masters)
    stand_ins = opt.masters(mixed)
    assert stand_ins[0].arena is not None, "the backend makes arenas: the masters get one"
    assert all(m.arena is stand_ins[0].arena for m in stand_ins)
    assert all(m.value is t for m, t in zip(stand_ins, masters))
    assert opt.optimizer.updated_finite(stand_ins), "the last step was not the fused pass"
    previous = neonlite.backends._current
    be32 = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype=np.float32)
    try:
        plain = _model_params(be32, SHAPES)
        reference = Adam(0.01, weight_decay=0.1)
        for step in range(3):
            _set_grads(plain, step)
            reference.optimize(plain, 0)
    finally:
        neonlite.backends._current = previous
    for p, q in zip(mixed, plain):
        np.testing.assert_array_equal(p.states["master"].get(), q.value.get())
        np.testing.assert_array_equal(p.states["v"].get(), q.states["v"].get())
        np.testing.assert_array_equal(p.value.get(), q.value.get().astype(np.float16))


def test_a_master_put_in_the_states_is_the_one_updated(be16):
    """Loading a checkpoint assigns new tensors to ``param.states``: the next step goes on
    from the loaded master, and ``param.states["master"]`` is again the one the step
    updates."""
    params = _model_params(be16, SHAPES)
    opt = MixedPrecision(GradientDescentMomentum(0.5), loss_scale=None)
    _set_grads(params, 0)
    opt.optimize(params, 0)
    loaded = {p.name: np.full(p.value.shape, 0.25, np.float32) for p in params}
    for p in params:
        p.states["master"] = be16.array(loaded[p.name], dtype=np.float32)
    for p in params:
        p.grad.set(np.ones(p.value.shape))
    opt.optimize(params, 0)
    for p in params:
        np.testing.assert_array_equal(p.states["master"].get(), -0.25)
        np.testing.assert_array_equal(p.value.get(), -0.25)
    opt.optimize(params, 0)
    for p in params:
        np.testing.assert_array_equal(p.states["master"].get(), -0.75)


def test_bf16_moment_states_stay_bf16_bits_under_mixed_precision(be16):
    params = _model_params(be16, SHAPES)
    opt = MixedPrecision(Adam(0.01, state_dtype="bf16"), loss_scale=None)
    _set_grads(params, 0)
    opt.optimize(params, 0)
    assert all(p.states[k].dtype == np.uint16 for p in params for k in ("m", "v"))
    assert all(p.states["master"].dtype == np.float32 for p in params)

