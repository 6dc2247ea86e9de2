"""The whole-sequence passes of the recurrent cells (``Backend.rnn_/lstm_/gru_fprop_sequence``
and their bprops): the CPU backend's C loop over time (``kernels/cpu/recurrent_sequences.c``,
its GEMMs called from C) against the contract's default, which runs the per-step ops one by
one, and against the numpy reference (``backends/reference/recurrent.py``), in float64 and
float32, forwards and reversed, with and without a padding mask, over a unit count that leaves
a short last chunk; the same bits on one thread and on all of them; every available backend
against the CPU through the harness; and the GPU backend's default passes, compiled and
emulated on the host (not run on a GPU), against the reference."""
import numpy as np
import pytest
from support.harness import compare_with_cpu, make_backend
from support.requires import requires

import neonlite
from neonlite.backends.backend_sequence import SequenceOps
from neonlite.backends.cpu.threads import libgomp, set_cpu_threads
from neonlite.backends.reference import recurrent as ref

T, N, H = 5, 3, 300
CELLS = ("rnn", "lstm", "gru")
BLOCKS = {"rnn": 1, "gru": 3, "lstm": 4}


class FixedWay:
    """A stand-in for the backend's WayTuner that always picks ``way``."""

    def __init__(self, way):
        self.way, self.calls = way, 0

    def pick(self, key, ways):
        self.calls += 1
        return self.way

    def record(self, key, way, seconds):
        pass


class _Backend:
    """The backend's own passes, called like the unbound defaults of ``SequenceOps``."""

    def __getattr__(self, name):
        return lambda be, *args: getattr(be, name)(*args)


def _sequence_backend(dtype):
    be = make_backend("cpu", batch_size=N, dtype=dtype)
    if getattr(be.kernels.gemm, "packed_gemm", None) is None or \
            be.kernels.module("recurrent_sequences", np.dtype(dtype)) is None:
        pytest.skip("the C sequence loop needs the C kernels and MKL's packed GEMMs "
                    "(pip install neonlite[mkl])")
    return be


def _inputs(cell, masked, seed=0, units=H):
    """Host arrays of one fprop and bprop of ``cell`` over T steps of ``units`` units."""
    rng = np.random.default_rng(seed)
    G = BLOCKS[cell] * units
    a = dict(gates=rng.normal(size=(T, N, G)), U=rng.normal(size=(units, G)) * 0.05,
             bias_h=rng.normal(size=G), h0=rng.normal(size=(N, units)),
             c0=rng.normal(size=(N, units)), dy=rng.normal(size=(T, N, units)),
             dh=rng.normal(size=(N, units)), dc=rng.normal(size=(N, units)),
             mask=(rng.random((T, N)) > 0.3).astype(np.float64) if masked else None)
    if cell != "gru":
        del a["bias_h"]
    if cell != "lstm":
        del a["c0"], a["dc"]
    return a


def _run(be, a, cell, reverse, act, gate_act, passes):
    """fprop then bprop of ``cell`` through ``passes`` (an object with the sequence methods,
    called with the backend first) on tensors of ``be`` (``a``: tensors or host arrays); host
    arrays of every output."""
    t = {k: None if v is None else v if hasattr(v, "backend") else be.array(v)
         for k, v in a.items()}
    Tn, Nn, G = t["gates"].shape
    Hn, m = G // BLOCKS[cell], t["mask"]
    h, hg = be.zeros((Tn + 1, Nn, Hn)), be.zeros((Nn, G))
    first = Tn if reverse else 0
    h[first] = t["h0"]
    d1, d2 = be.zeros((Tn, Nn, G)), be.zeros((Tn, Nn, G))
    if cell == "rnn":
        passes.rnn_fprop_sequence(be, t["gates"], hg, t["U"], h, m, reverse, act)
        passes.rnn_bprop_sequence(be, h, t["U"], t["dy"], t["dh"], d1, m, reverse, act)
        out = [h, t["dh"], d1]
    elif cell == "lstm":
        c = be.zeros((Tn + 1, Nn, Hn))
        c[first] = t["c0"]
        passes.lstm_fprop_sequence(be, t["gates"], hg, t["U"], c, h, m, reverse, act, gate_act)
        passes.lstm_bprop_sequence(be, t["gates"], t["U"], c, t["dy"], t["dh"], t["dc"], d1, m,
                                   reverse, act, gate_act)
        out = [t["gates"], c, h, t["dh"], t["dc"], d1]
    else:
        hn = be.zeros((Tn, Nn, Hn))
        passes.gru_fprop_sequence(be, t["gates"], hg, t["U"], t["bias_h"], hn, h, m, reverse)
        passes.gru_bprop_sequence(be, t["gates"], t["U"], hn, h, t["dy"], t["dh"], d1, d2, m,
                                  reverse)
        out = [t["gates"], hn, h, t["dh"], d1, d2]
    return [x.get() for x in out]


def _reference(a, cell, reverse, act, gate_act):
    """The same passes through the numpy reference."""
    a = {k: None if v is None else v.copy() for k, v in a.items()}
    Tn, Nn, G = a["gates"].shape
    Hn, m = G // BLOCKS[cell], a["mask"]
    h, first = np.zeros((Tn + 1, Nn, Hn)), Tn if reverse else 0
    h[first] = a["h0"]
    d1, d2 = np.zeros((Tn, Nn, G)), np.zeros((Tn, Nn, G))
    if cell == "rnn":
        ref.rnn_fprop_sequence(a["gates"], a["U"], h, m, reverse, act)
        ref.rnn_bprop_sequence(h, a["U"], a["dy"], a["dh"], d1, m, reverse, act)
        return [h, a["dh"], d1]
    if cell == "lstm":
        c = np.zeros((Tn + 1, Nn, Hn))
        c[first] = a["c0"]
        ref.lstm_fprop_sequence(a["gates"], a["U"], c, h, m, reverse, act, gate_act)
        ref.lstm_bprop_sequence(a["gates"], a["U"], c, a["dy"], a["dh"], a["dc"], d1, m, reverse,
                                act, gate_act)
        return [a["gates"], c, h, a["dh"], a["dc"], d1]
    hn = np.zeros((Tn, Nn, Hn))
    ref.gru_fprop_sequence(a["gates"], a["U"], a["bias_h"], hn, h, m, reverse)
    ref.gru_bprop_sequence(a["gates"], a["U"], hn, h, a["dy"], a["dh"], d1, d2, m, reverse)
    return [a["gates"], hn, h, a["dh"], d1, d2]


def _assert_all_close(got, want, tol, what):
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{what}: output {i}")


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-4)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("cell,act,gate_act", [("rnn", "tanh", None), ("rnn", "relu", None),
                                               ("lstm", "tanh", "logistic"),
                                               ("lstm", "relu", "tanh"), ("gru", None, None)])
def test_c_sequence_loop_matches_the_steps_and_the_reference(dtype, tol, masked, reverse, cell,
                                                             act, gate_act):
    be = _sequence_backend(dtype)
    a = _inputs(cell, masked)
    be._sequence_tuner = FixedWay("all")
    got = _run(be, a, cell, reverse, act, gate_act, _Backend())
    assert be._sequence_tuner.calls == 2, "the C sequence loop did not run"
    _assert_all_close(got, _run(be, a, cell, reverse, act, gate_act, SequenceOps), tol,
                      "the C loop against the step ops one by one")
    _assert_all_close(got, _reference(a, cell, reverse, act, gate_act), tol,
                      "the C loop against the numpy reference")


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("masked", [False, True])
def test_one_thread_and_all_threads_give_the_same_bits(cell, masked):
    be = _sequence_backend(np.float32)
    a = _inputs(cell, masked, seed=1)
    act, gate_act = ("tanh", "logistic") if cell == "lstm" else ("tanh", None)
    gomp = libgomp()
    before = gomp.omp_get_max_threads() if gomp is not None else 1
    results = []
    try:
        set_cpu_threads(max(before, 2))  # "all" is two threads even where one is the default
        for way in ("one", "all"):
            be._sequence_tuner = FixedWay(way)
            results.append(_run(be, a, cell, False, act, gate_act, _Backend()))
    finally:
        set_cpu_threads(before)
    for one, every in zip(*results):
        np.testing.assert_array_equal(one, every)


@pytest.mark.parametrize("cell", CELLS)
def test_every_backend_matches_the_cpu(cell):
    a = _inputs(cell, True, seed=2, units=7)
    keys = list(a)
    act, gate_act = ("tanh", "logistic") if cell == "lstm" else ("tanh", None)

    def passes(be, *tensors):
        return tuple(_run(be, dict(zip(keys, tensors)), cell, True, act, gate_act, _Backend()))
    cpu = compare_with_cpu(passes, *[a[k] for k in keys], rtol=1e-5, atol=1e-5, batch_size=N)
    _assert_all_close(cpu, _reference(a, cell, True, act, gate_act), 2e-4,
                      "the CPU backend (float32) against the numpy reference")


@requires("emulator")
@pytest.mark.parametrize("cell", CELLS)
def test_gpu_backend_on_the_host_emulator_matches_the_reference(monkeypatch, cell):
    """The GPU backend keeps the contract's default passes: its step kernels and cuBLAS GEMMs,
    compiled and emulated on the host (not run on a GPU)."""
    from support.gpu_host_backend import host_gpu_backend
    a = _inputs(cell, True, seed=3, units=7)
    act, gate_act = ("tanh", "logistic") if cell == "lstm" else ("tanh", None)
    previous = neonlite.backends._current
    try:
        gpu = host_gpu_backend(monkeypatch, batch_size=N, dtype=np.float32)
        got = _run(gpu, {k: None if v is None else v.astype(np.float32) for k, v in a.items()},
                   cell, True, act, gate_act, _Backend())
        assert {f"nl_{cell}_fprop_f32", f"nl_{cell}_bprop_f32"} <= set(gpu.device.launches)
    finally:
        neonlite.backends._current = previous
    _assert_all_close(got, _reference(a, cell, True, act, gate_act), 2e-4,
                      "the GPU backend (emulated) against the numpy reference")
