"""The CPU backend's bias-row path (``add_row`` of kernels/cpu/rows.c): ``out[:] = x + row``
with a row (a bias (C,), a positional block (T, D)) broadcast over x's leading axes equals the
op-tree machine bit for bit and numpy, also in place, without allocating; the arrays it must
leave to the machine (a strided output, a row inside the output, an input overlapping the
output elsewhere) are refused without writing anything."""
import tracemalloc

import numpy as np
import pytest

from neonlite.backends.reference.optree import evaluate

from support.harness import compare_with_cpu, make_backend

DTYPES = (np.float32, np.float64)


def _tensors(be):
    rng = np.random.default_rng(4)
    return {"x": be.array(rng.standard_normal((6, 5, 8))), "out": be.zeros((6, 5, 8)),
            "b": be.array(rng.standard_normal(8)), "w": be.array(rng.standard_normal((5, 8)))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["bias", "bias first", "block", "in place"])
def test_taken_trees_match_the_machine_and_numpy(dtype, case):
    results = []
    for way in ("row", "machine", "numpy"):
        be = make_backend("cpu", batch_size=6, dtype=dtype)
        t = _tensors(be)
        x, out = t["x"], t["out"]
        out, tree = {"bias": (out, x + t["b"]), "bias first": (out, t["b"] + x),
                     "block": (out, x + t["w"]), "in place": (x, x + t["b"])}[case]
        if way == "row":
            assert be._add_row_into(out._ary, tree)
        elif way == "machine":
            assert be._machine.run(out._ary, tree)
        else:
            evaluate(out._ary, tree)
        results.append(out.get())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], results[2], rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_refused_arrays_write_nothing(dtype):
    be = make_backend("cpu", batch_size=6, dtype=dtype)
    t = _tensors(be)
    x, b = t["x"], t["b"]
    wide = be.array(np.arange(6 * 5 * 16, dtype=dtype).reshape(6, 5, 16))
    line = be.array(np.arange(48, dtype=dtype))
    refused = [
        (wide[:, :, 8:], x + b),  # a strided output
        (line[:40].reshape(5, 8), t["w"] + line[:8]),  # the row lies in the output
        (line[:40].reshape(5, 8), line[8:].reshape(5, 8) + b),  # x overlaps the output, shifted
        (x, x * b), (x, x + 1.0), (x, t["w"] + t["w"]),
    ]
    for out, tree in refused:
        before = out.get()
        assert not be._add_row_into(out._ary, tree), repr(tree)
        np.testing.assert_array_equal(out.get(), before)
    shifted = line.get()
    line[:40].reshape(5, 8)[:] = line[8:].reshape(5, 8) + b
    np.testing.assert_allclose(line.get()[:40], (shifted[8:].reshape(5, 8) + b.get()).ravel())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_taken_tree_allocates_nothing(dtype):
    be = make_backend("cpu", batch_size=6, dtype=dtype)
    t = _tensors(be)
    out, tree = t["out"]._ary, t["x"] + t["b"]
    assert be._add_row_into(out, tree)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        assert be._add_row_into(out, tree)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert peak < 4096, f"the bias-row path allocated {peak} bytes"


def test_bias_rows_on_every_backend():
    rng = np.random.default_rng(5)
    x, b, w = rng.standard_normal((300, 7, 24)), rng.standard_normal(24), \
        rng.standard_normal((7, 24))

    def op(be, xt, bt, wt):
        out, block = be.zeros(xt.shape), be.zeros(xt.shape)
        out[:] = xt + bt
        block[:] = wt + xt
        return out, block

    got, block = compare_with_cpu(op, x, b, w, dtype=np.float64)
    np.testing.assert_allclose(got, x + b, rtol=1e-15)
    np.testing.assert_allclose(block, x + w, rtol=1e-15)
