"""The sequence reductions (``RecurrentLast``, ``RecurrentSum``, ``RecurrentMean``) after an
fprop on a sequence shorter than the T they were configured for (recurrent stacks take 1..T
steps): output and input gradient equal those of a fresh layer configured for the shorter
length and a float64 finite-difference check, alone and behind a recurrent cell (whose bprop
takes only the gradient of the steps it ran)."""
import numpy as np
import pytest
from support.harness import _assert_close, _numeric_grad, build

import neonlite
from neonlite.layers import GRU, Recurrent, RecurrentLast, RecurrentMean, RecurrentSum

N, T, SHORT, D, H = 3, 6, 2, 4, 3
REDUCTIONS = [RecurrentLast, RecurrentSum, RecurrentMean]


def _fprop(net, x):
    """The layers of ``net`` in turn (a Sequential checks its input against the configured
    length; the recurrent layers themselves take 1..T steps)."""
    for layer in net.layers:
        x = layer.fprop(x)
    return x


def _bprop(net, error):
    for layer in reversed(net.layers):
        error = layer.bprop(error)
    return error


def _run(net, be, x, w):
    """(output, input gradient, parameter gradients) of L = sum(w * net(x))."""
    for p in net.parameters():
        p.grad[:] = 0.0
    y = _fprop(net, be.array(x)).get()
    dx = _bprop(net, be.array(w)).get()
    return y, dx, [p.grad.get() for p in net.parameters()]


def _nets(make):
    """The net configured for T steps and a fresh one for SHORT, with the same parameters."""
    long_net, short_net = build(make(), (T, D)), build(make(), (SHORT, D))
    for a, b in zip(long_net.parameters(), short_net.parameters()):
        b.value.set(a.value.get())
    return long_net, short_net


@pytest.mark.parametrize("reduce", REDUCTIONS, ids=lambda r: r.__name__)
@pytest.mark.parametrize("cell", [None, Recurrent, GRU], ids=["alone", "Recurrent", "GRU"])
def test_reduction_after_a_shorter_fprop(reduce, cell):
    neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(7)

    def make():
        return neonlite.layers.Sequential(([cell(H)] if cell else []) + [reduce()])
    long_net, short_net = _nets(make)
    x = rng.normal(size=(N, SHORT, D))
    w = rng.normal(size=(N, H if cell else D))
    _run(long_net, be, rng.normal(size=(N, T, D)), w)  # a full-length step first
    y, dx, grads = _run(long_net, be, x, w)
    y_ref, dx_ref, grads_ref = _run(short_net, be, x, w)
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    assert dx.shape == (N, SHORT, D), f"input gradient of shape {dx.shape} for a " \
                                      f"{SHORT}-step input"
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-12, atol=1e-12)
    for g, g_ref in zip(grads, grads_ref):
        np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12)

    x_t = be.array(x.copy())

    def loss():
        return float(np.sum(w * _fprop(long_net, x_t).get()))
    _assert_close("input", dx, _numeric_grad(loss, x.copy(), x_t.set, 1e-6), 1e-6, 1e-8)
