"""Recurrent layers (``layers/recurrent.py``, ``layers/recurrent_stack.py``): float64
finite-difference gradient checks (with and without a padding mask, reversed, final state only,
bidirectional, deep, the reductions, a stateful carry-over), the state and mask semantics, and
one clear error for bad input."""
import numpy as np
import pytest
from support.harness import _assert_close, _numeric_grad, build, gradient_check

import neonlite
from neonlite.layers import (GRU, LSTM, BiGRU, BiLSTM, BiRNN, DeepBiLSTM, Recurrent,
                             RecurrentLast, RecurrentMean, RecurrentSum)
from neonlite.transforms import Logistic, Rectlin, Softmax

T, D, H = 4, 3, 5
CELLS = [lambda **k: Recurrent(H, **k), lambda **k: LSTM(H, forget_bias=1.0, **k),
         lambda **k: GRU(H, **k)]
CELL_IDS = ["Recurrent", "LSTM", "GRU"]


def _mask(batch):
    """Right-padded sequences of lengths T, T-2, 1 (then T again)."""
    lengths = [T, T - 2, 1, T][:batch]
    return np.array([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths])


@pytest.mark.parametrize("make", CELLS, ids=CELL_IDS)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("return_sequences", [True, False])
def test_cell_gradients(make, reverse, return_sequences):
    gradient_check(lambda: make(reverse=reverse, return_sequences=return_sequences), (T, D),
                   batch=3, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("make", CELLS, ids=CELL_IDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_cell_gradients_with_a_padding_mask(make, reverse):
    def layer():
        cell = make(reverse=reverse)
        cell.mask = neonlite.get_backend().array(_mask(3))
        return cell
    gradient_check(layer, (T, D), batch=3, rtol=1e-5, atol=1e-8)


def test_other_activations_take_gradients():
    gradient_check(lambda: Recurrent(H, activation=Rectlin()), (T, D), atol=1e-8)
    gradient_check(lambda: LSTM(H, activation=Logistic(), gate_activation=Logistic()), (T, D),
                   atol=1e-8)


@pytest.mark.parametrize("bi", [BiRNN, BiLSTM, BiGRU])
@pytest.mark.parametrize("merge", ["concat", "sum"])
def test_bidirectional_gradients(bi, merge):
    gradient_check(lambda: bi(H, merge=merge), (T, D), rtol=1e-5, atol=1e-8)


def test_bidirectional_final_states_and_deep_stack_gradients():
    gradient_check(lambda: BiLSTM(H, return_sequences=False), (T, D), atol=1e-8)
    gradient_check(lambda: DeepBiLSTM(4, depth=2), (T, D), atol=1e-8)


@pytest.mark.parametrize("reduce", [RecurrentLast, RecurrentSum, RecurrentMean])
def test_reduction_gradients(reduce):
    gradient_check(reduce, (T, D), atol=1e-9)


def test_padded_steps_neither_change_the_state_nor_output_anything():
    neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, T, D))
    net = build(LSTM(H, return_sequences=True), (T, D))
    layer = net.layers[0]
    y = layer.fprop(be.array(x), mask=be.array(_mask(3))).get()
    np.testing.assert_array_equal(layer.fprop(be.array(x), mask=_mask(3)).get(), y)
    assert not y[1, T - 2:].any() and not y[2, 1:].any()
    for n, length in enumerate([T, T - 2, 1]):
        alone = layer.fprop(be.array(np.where(np.arange(T)[None, :, None] < length, x, 0.0)))
        np.testing.assert_allclose(y[n, :length], alone.get()[n, :length], rtol=1e-13)
    final = build(LSTM(H, return_sequences=False), (T, D)).layers[0]
    for p, q in zip(final.parameters(), layer.parameters()):
        p.value[:] = q.value
    last = final.fprop(be.array(x), mask=be.array(_mask(3))).get()
    np.testing.assert_allclose(last[1], y[1, T - 3], rtol=1e-13)
    np.testing.assert_allclose(last[2], y[2, 0], rtol=1e-13)


@pytest.mark.parametrize("make", CELLS, ids=CELL_IDS)
def test_stateful_carry_over_gradients(make):
    """Truncated BPTT: the second minibatch starts from the first one's final state, which is
    held fixed (the finite differences set it back before every fprop)."""
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(7)
    net = build(make(stateful=True), (T, D))
    layer = net.layers[0]
    for p in net.parameters():
        p.value.set(p.value.get() + rng.normal(0, 0.3, p.value.shape))
    first, second = be.array(rng.normal(size=(2, T, D))), be.array(rng.normal(size=(2, T, D)))
    net.fprop(first)
    carried = layer.state()
    assert all(np.abs(v).max() > 0 for v in carried.values())
    w = rng.normal(size=(2, T, H))

    def loss():
        layer.set_state(**carried)
        return float(np.sum(w * net.fprop(second).get()))

    base = loss()
    layer.set_state(**carried)
    fresh = float(np.sum(w * build(make(), (T, D)).fprop(second).get()))
    assert base != fresh
    for p in net.parameters():
        p.grad[:] = 0.0
    layer.set_state(**carried)
    net.fprop(second)
    dx = net.bprop(be.array(w)).get()
    analytic = {p.name: p.grad.get() for p in net.parameters()}
    x = second.get()
    _assert_close("input", dx, _numeric_grad(loss, x.copy(), second.set, 1e-6), 1e-5, 1e-8)
    for p in net.parameters():
        numeric = _numeric_grad(loss, p.value.get(), p.value.set, 1e-6)
        _assert_close(p.name, analytic[p.name], numeric, 1e-5, 1e-8)


def test_stateful_layer_carries_and_resets_with_the_callback():
    from neonlite.callbacks import ResetState
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    x = be.array(np.random.default_rng(1).normal(size=(2, T, D)))
    net = build(LSTM(H, stateful=True), (T, D))
    layer = net.layers[0]
    one = net.fprop(x).get()
    two = net.fprop(x).get()
    assert np.abs(one - two).max() > 1e-6
    callback = ResetState()
    callback.model = type("M", (), {"layers": net})()
    callback.on_epoch_begin(1)
    np.testing.assert_array_equal(net.fprop(x).get(), one)
    layer.set_initial_state(h=np.ones((2, H)), c=np.ones((2, H)))
    layer.reset_state()
    assert np.abs(net.fprop(x).get() - one).max() > 1e-6


def test_bad_input_gets_one_clear_error():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    net = build(LSTM(H, stateful=True, name="lstm"), (T, D))
    layer = net.layers[0]
    with pytest.raises(ValueError, match=r"'lstm' \(LSTM\): a sequence of 6 steps, but the "
                                         r"layer was allocated for at most 4"):
        layer.fprop(be.zeros((2, T + 2, D)))
    with pytest.raises(ValueError, match=r"'lstm' \(LSTM\): mask must have shape \(2, 4\) "
                                         r"\(N, T\), got \(2, 3\)"):
        layer.fprop(be.zeros((2, T, D)), mask=be.ones((2, 3)))
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 4\) \(N, T\), got \(4,\)"):
        layer.fprop(be.zeros((2, T, D)), mask=np.ones(4))
    with pytest.raises(ValueError, match=r"expected a sequence batch \(2, T, 3\), got \(2, 4, 5\)"):
        layer.fprop(be.zeros((2, T, 5)))
    with pytest.raises(ValueError, match="the activation must be one of Tanh, Logistic"):
        build(Recurrent(H, activation=Softmax(), name="rnn"), (T, D))
    with pytest.raises(neonlite.layers.ShapeError, match="expects a sequence"):
        build(GRU(H), (T * D,))


def test_shorter_sequences_use_the_first_steps():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    x = np.random.default_rng(2).normal(size=(2, T, D))
    layer = build(GRU(H), (T, D)).layers[0]
    full = layer.fprop(be.array(x)).get()
    short = layer.fprop(be.array(x[:, :2].copy())).get()
    np.testing.assert_allclose(short, full[:, :2], rtol=1e-14)


def test_descriptions_round_trip_and_parameters_reload(tmp_path):
    from neonlite import Model
    from neonlite.config.yaml_io import dump_yaml, parse_yaml
    from neonlite.serialize import ShapeStub
    layers = [LSTM(6, forget_bias=1.0, stateful=True, name="lstm"), GRU(4, reverse=True),
              Recurrent(3, activation=Rectlin(), return_sequences=False),
              BiLSTM(2, merge="sum"), DeepBiLSTM(2, depth=2)]
    for layer in layers:
        desc = layer.get_description()
        again = parse_yaml(dump_yaml(desc))
        assert again == desc
        assert type(layer)(**again["config"]).get_description() == desc
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    model = Model([LSTM(6, stateful=True, name="lstm"), RecurrentMean()])
    model.initialize(ShapeStub((T, D)))
    x = model.be.array(np.random.default_rng(3).normal(size=(2, T, D)))
    model.fprop(x)
    params = model.get_params()
    assert set(params) == {"lstm.W", "lstm.U", "lstm.b"}
    carried = model.layers.layers[0].state()
    expected = model.fprop(x).get()
    other = Model.from_description(parse_yaml(dump_yaml(model.get_description())))
    other.initialize(ShapeStub((T, D)))
    other.set_params(params)
    other.layers.layers[0].set_state(**carried)
    np.testing.assert_array_equal(other.fprop(other.be.array(x.get())).get(), expected)


def test_training_steps_after_the_first_allocate_nothing_of_size():
    """Every T-step buffer is made in allocate(): LSTM, GRU, Recurrent and a masked
    bidirectional layer under a per-token softmax head train, and the later steps' traced peak
    stays at the size of Python objects; the whole-sequence kernels' packed work arrays are
    made once."""
    from support.checks import PEAK_LIMIT, allocation_peaks as _peaks

    from neonlite import Model
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.optimizers import Adam
    from neonlite.serialize import ShapeStub
    from neonlite.transforms import CrossEntropyMulti
    be = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    bi = BiLSTM(16)
    bi.mask = be.array(np.ones((8, 32)))
    model = Model([LSTM(64), GRU(32), Recurrent(48), bi, Affine(8, activation=Softmax())])
    model.initialize(ShapeStub((32, 24)), GeneralizedCost(CrossEntropyMulti()))
    rng = np.random.default_rng(0)
    x = be.array(rng.normal(size=(8, 32, 24)))
    t = be.array(np.eye(8)[rng.integers(0, 8, size=(8, 32))])
    opt = Adam(1e-3)

    def step():
        model.train_step(x, t, opt, 0)
        return True
    step()
    work = dict(be.kernels.workspaces)
    assert max(_peaks(step)) < PEAK_LIMIT
    assert all(be.kernels.workspaces.get(key) is buf for key, buf in work.items())
    assert be.kernels.workspaces.keys() == work.keys()


@pytest.mark.parametrize("make", CELLS, ids=CELL_IDS)
def test_decoding_one_step_at_a_time_gives_the_sequence_outputs(make):
    """Decoding runs the cells' step ops, fprop their whole-sequence passes: the same states
    from the same initial state (float64, to rounding)."""
    neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(11)
    net = build(make(), (T, D))
    layer = net.layers[0]
    for p in net.parameters():
        p.value.set(p.value.get() + rng.normal(0, 0.3, p.value.shape))
    start = rng.normal(size=(3, H))
    layer.set_initial_state(h=start, **({"c": -start} if "c" in layer.states else {}))
    x = rng.normal(size=(3, T, D))
    whole = net.fprop(be.array(x)).get()
    state = layer.init_decode(3, T)
    steps = [layer.decode(be.array(x[:, t:t + 1]), state).get() for t in range(T)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), whole, rtol=1e-12, atol=1e-12)
