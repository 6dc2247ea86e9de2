"""The LSTM's whole-sequence passes (``Backend.lstm_fprop_sequence`` / ``lstm_bprop_sequence``):
the CPU backend's C loop over time (``kernels/cpu/recurrent.c``, its GEMMs called from C) against
the contract's default, which runs the per-step kernels one by one, in float64 and float32,
forwards and reversed, with and without a padding mask, over a unit count that leaves a short
last chunk; and bit-identical results on one thread and on all of them."""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite.backends.backend_sequence import SequenceOps

T, N, H = 5, 3, 300


class FixedWay:
    """A stand-in for the backend's WayTuner that always picks ``way``."""

    def __init__(self, way):
        self.way, self.calls = way, 0

    def pick(self, key, ways):
        self.calls += 1
        return self.way

    def record(self, key, way, seconds):
        pass


def _sequence_backend(dtype):
    be = make_backend("cpu", batch_size=N, dtype=dtype)
    if getattr(be.kernels.gemm, "gemm_address", None) is None or \
            be.kernels.module("recurrent_sequences", np.dtype(dtype)) is None:
        pytest.skip("the C sequence loop needs the C kernels and MKL's GEMM "
                    "(pip install neonlite[mkl])")
    return be


def _inputs(masked, seed=0):
    rng = np.random.default_rng(seed)
    mask = (rng.random((T, N)) > 0.3).astype(np.float64) if masked else None
    return dict(gates=rng.normal(size=(T, N, 4 * H)), U=rng.normal(size=(H, 4 * H)) * 0.05,
                h0=rng.normal(size=(N, H)), c0=rng.normal(size=(N, H)),
                dy=rng.normal(size=(T, N, H)), dh=rng.normal(size=(N, H)),
                dc=rng.normal(size=(N, H)), mask=mask)


def _run(be, a, reverse, act, gate_act, passes):
    """fprop then bprop through ``passes`` (an object with the two sequence methods, called
    with the backend first); host arrays of every output."""
    t = {k: None if v is None else be.array(v) for k, v in a.items()}
    c, h = be.zeros((T + 1, N, H)), be.zeros((T + 1, N, H))
    first = T if reverse else 0
    c[first], h[first] = t["c0"], t["h0"]
    hg, dgates = be.zeros((N, 4 * H)), be.zeros((T, N, 4 * H))
    passes.lstm_fprop_sequence(be, t["gates"], hg, t["U"], c, h, t["mask"], reverse, act,
                               gate_act)
    passes.lstm_bprop_sequence(be, t["gates"], t["U"], c, t["dy"], t["dh"], t["dc"], dgates,
                               t["mask"], reverse, act, gate_act)
    return [x.get() for x in (t["gates"], c, h, t["dh"], t["dc"], dgates)]


class _Backend:
    """The backend's own (C) passes, called like the unbound defaults."""

    @staticmethod
    def lstm_fprop_sequence(be, *args):
        be.lstm_fprop_sequence(*args)

    @staticmethod
    def lstm_bprop_sequence(be, *args):
        be.lstm_bprop_sequence(*args)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-4)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("act,gate_act", [("tanh", "logistic"), ("relu", "tanh")])
def test_c_sequence_loop_matches_the_steps_one_by_one(dtype, tol, masked, reverse, act,
                                                      gate_act):
    be = _sequence_backend(dtype)
    a = _inputs(masked)
    be._sequence_tuner = FixedWay("all")
    got = _run(be, a, reverse, act, gate_act, _Backend)
    assert be._sequence_tuner.calls == 2, "the C sequence loop did not run"
    want = _run(be, a, reverse, act, gate_act, SequenceOps)
    for name, g, w in zip(("gates", "c", "h", "dh", "dc", "dgates"), got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("masked", [False, True])
def test_one_thread_and_all_threads_give_the_same_bits(masked):
    be = _sequence_backend(np.float32)
    a = _inputs(masked, seed=1)
    results = []
    for way in ("one", "all"):
        be._sequence_tuner = FixedWay(way)
        results.append(_run(be, a, False, "tanh", "logistic", _Backend))
    for one, every in zip(*results):
        np.testing.assert_array_equal(one, every)
