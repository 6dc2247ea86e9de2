"""The recurrent gate steps (``Backend.*_step``): the CPU backend's C kernels against the numpy
reference (``backends/reference/recurrent.py``) in float64 and float32, with and without a padding
mask and for every activation; every available backend against the CPU through the harness;
and the CUDA kernels (``kernels/cuda/recurrent.cu``), compiled and emulated on the host (not
run on a GPU), against the CPU."""
import numpy as np
import pytest
from support.harness import compare_with_cpu
from support.requires import requires

import neonlite
from neonlite.backends.reference import recurrent as ref

N, H = 5, 7


def _inputs(seed, masked):
    rng = np.random.default_rng(seed)
    arrays = {"x1": rng.normal(size=(N, H)), "h1": rng.normal(size=(N, H)),
              "x4": rng.normal(size=(N, 4 * H)), "h4": rng.normal(size=(N, 4 * H)),
              "x3": rng.normal(size=(N, 3 * H)), "h3": rng.normal(size=(N, 3 * H)),
              "bh": rng.normal(size=3 * H), "h_prev": rng.normal(size=(N, H)),
              "c_prev": rng.normal(size=(N, H)), "dy": rng.normal(size=(N, H)),
              "dh": rng.normal(size=(N, H)), "dc": rng.normal(size=(N, H)),
              "mask": (np.arange(N) % 3 != 1).astype(np.float64)}
    if not masked:
        arrays["mask"] = None
    return arrays


def run_steps(be, a, act, gate_act):
    """Every gate step forward then backward on backend ``be``; host arrays in and out."""
    t = {k: None if v is None else be.array(v) for k, v in a.items()}
    m = t["mask"]
    h, c = be.zeros((N, H)), be.zeros((N, H))
    be.rnn_fprop_step(t["x1"], t["h1"], t["h_prev"], h, m, act)
    dh, dpre = be.array(a["dh"]), be.zeros((N, H))
    be.rnn_bprop_step(h, t["dy"], dh, dpre, m, act)
    rnn = [h.get(), dh.get(), dpre.get()]
    gates, lh = be.array(a["x4"]), be.zeros((N, H))
    be.lstm_fprop_step(gates, t["h4"], t["c_prev"], c, t["h_prev"], lh, m, act, gate_act)
    ldh, ldc, dg = be.array(a["dh"]), be.array(a["dc"]), be.zeros((N, 4 * H))
    be.lstm_bprop_step(gates, t["c_prev"], c, t["dy"], ldh, ldc, dg, m, act, gate_act)
    lstm = [gates.get(), c.get(), lh.get(), ldh.get(), ldc.get(), dg.get()]
    g3, hn, gh = be.array(a["x3"]), be.zeros((N, H)), be.zeros((N, H))
    be.gru_fprop_step(g3, t["h3"], t["bh"], hn, t["h_prev"], gh, m)
    gdh, dgx, dgh = be.array(a["dh"]), be.zeros((N, 3 * H)), be.zeros((N, 3 * H))
    be.gru_bprop_step(g3, hn, t["h_prev"], None, gdh, dgx, dgh, m)
    gru = [g3.get(), hn.get(), gh.get(), gdh.get(), dgx.get(), dgh.get()]
    return rnn + lstm + gru


def run_reference(a, act, gate_act):
    """The same steps through the numpy reference."""
    m = a["mask"]
    h = np.zeros((N, H))
    ref.rnn_fprop_step(a["x1"], a["h1"], a["h_prev"], h, m, act)
    dh, dpre = a["dh"].copy(), np.zeros((N, H))
    ref.rnn_bprop_step(h, a["dy"], dh, dpre, m, act)
    gates, c, lh = a["x4"].copy(), np.zeros((N, H)), np.zeros((N, H))
    ref.lstm_fprop_step(gates, a["h4"], a["c_prev"], c, a["h_prev"], lh, m, act, gate_act)
    ldh, ldc, dg = a["dh"].copy(), a["dc"].copy(), np.zeros((N, 4 * H))
    ref.lstm_bprop_step(gates, a["c_prev"], c, a["dy"], ldh, ldc, dg, m, act, gate_act)
    g3, hn, gh = a["x3"].copy(), np.zeros((N, H)), np.zeros((N, H))
    ref.gru_fprop_step(g3, a["h3"], a["bh"], hn, a["h_prev"], gh, m)
    gdh, dgx, dgh = a["dh"].copy(), np.zeros((N, 3 * H)), np.zeros((N, 3 * H))
    ref.gru_bprop_step(g3, hn, a["h_prev"], None, gdh, dgx, dgh, m)
    return [h, dh, dpre, gates, c, lh, ldh, ldc, dg, g3, hn, gh, gdh, dgx, dgh]


ACTS = [("tanh", "logistic"), ("relu", "tanh"), ("identity", "identity"), ("logistic", "relu")]


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 2e-5)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("act,gate_act", ACTS)
def test_c_gate_kernels_match_the_numpy_reference(dtype, tol, masked, act, gate_act):
    be = neonlite.gen_backend("cpu", batch_size=N, datatype=dtype)
    if not be.kernels.module("recurrent", np.dtype(dtype)):
        pytest.skip(f"the C kernels are not built here: {be.kernels.unavailable_reason()}")
    a = _inputs(3, masked)
    got = run_steps(be, a, act, gate_act)
    want = run_reference({k: None if v is None else v.astype(dtype) for k, v in a.items()},
                         act, gate_act)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {i}")


def test_masked_rows_keep_their_state_and_pass_gradients_through():
    a = _inputs(4, True)
    out = run_reference(a, "tanh", "logistic")
    pad = a["mask"] == 0
    np.testing.assert_array_equal(out[0][pad], a["h_prev"][pad])       # rnn h
    np.testing.assert_array_equal(out[4][pad], a["c_prev"][pad])       # lstm c
    np.testing.assert_array_equal(out[7][pad], a["dc"][pad])           # lstm dc passes
    np.testing.assert_array_equal(out[6][pad], (a["dh"] + a["dy"])[pad])
    assert not out[8][pad].any() and not out[13][pad].any()            # no gate gradients


def test_every_backend_matches_the_cpu():
    a = _inputs(5, True)
    keys = list(a)
    compare_with_cpu(lambda be, *ts: tuple(run_steps(be, dict(zip(keys, [t.get() for t in ts])),
                                                     "tanh", "logistic")),
                     *[a[k] for k in keys], rtol=1e-5, atol=1e-5, batch_size=N)


@requires("emulator")
@pytest.mark.parametrize("masked", [False, True])
def test_cuda_gate_kernels_on_the_host_emulator_match_the_cpu(monkeypatch, masked):
    from support.gpu_host_backend import host_gpu_backend
    previous = neonlite.backends._current
    try:
        gpu = host_gpu_backend(monkeypatch, batch_size=N, dtype=np.float32)
        a = {k: None if v is None else v.astype(np.float32)
             for k, v in _inputs(6, masked).items()}
        got = run_steps(gpu, a, "tanh", "logistic")
        assert {f"nl_{k}_f32" for k in ("rnn_fprop", "rnn_bprop", "lstm_fprop", "lstm_bprop",
                                        "gru_fprop", "gru_bprop")} <= set(gpu.device.launches)
    finally:
        neonlite.backends._current = previous
    want = run_reference(_inputs(6, masked), "tanh", "logistic")
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")
