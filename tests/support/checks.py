"""Checks that tests of more than one folder share: the bytes a step allocates
(:func:`allocation_peaks`, :data:`PEAK_LIMIT`), two checkpoints holding the same training state
(:func:`assert_same_state`), and a Chrome trace whose slices nest (:func:`assert_nested`)."""
import tracemalloc

import numpy as np

#: what a training step after the first may hold at once beyond what it held before (bytes):
#: small temporaries only, no array of a layer's size
PEAK_LIMIT = 20 << 10


def allocation_peaks(step, times=3):
    """The most bytes ``step()`` (which must return a true value) held at once beyond what was
    held before it, for each of ``times`` calls, as tracemalloc counts them."""
    peaks = []
    tracemalloc.start()
    try:
        for _ in range(times):
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            assert step()
            peaks.append(tracemalloc.get_traced_memory()[1] - start)
    finally:
        tracemalloc.stop()
    return peaks


def assert_same_state(a, b):
    assert list(a.params) == list(b.params)
    for name in a.params:
        assert np.array_equal(a.params[name], b.params[name]), name
    assert a.states.keys() == b.states.keys()
    for name in a.states:
        for key in a.states[name]:
            assert np.array_equal(a.states[name][key], b.states[name][key]), (name, key)
    assert a.optimizer_state == b.optimizer_state
    assert (a.epoch_index, a.step_index) == (b.epoch_index, b.step_index)
    assert a.rng == b.rng


def assert_nested(events):
    """On each process row, any two slices are disjoint or one contains the other."""
    for pid in {e["pid"] for e in events}:
        row = sorted((e for e in events if e["pid"] == pid), key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in row:
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-3, f"{e['name']} straddles"
            open_ends.append(end)
