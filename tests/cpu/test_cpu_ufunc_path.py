"""The CPU backend's ufunc path for one or two adds/subs/muls of tensors (backends/cpu/ufunc.py):
the trees it takes equal the op-tree machine's results bit for bit and numpy's reference, with
the output aliasing an operand exactly, operands of the output's shape (leading axes of length 1
aside) and an inner leading-axes sum, without allocating; the trees it must leave to the machine
(scalars, products under a sum, an operand overlapping the output in a chain, an operand that
broadcasts along an axis) are refused without writing anything."""
import tracemalloc

import numpy as np
import pytest

from neonlite.backends.cpu.ufunc import MAX_ELEMENTS, run_ufuncs
from neonlite.backends.reference.optree import evaluate

from support.harness import make_backend

DTYPES = (np.float32, np.float64)


def _setup(dtype):
    be = make_backend("cpu", batch_size=4, dtype=dtype)
    rng = np.random.default_rng(3)
    t = {k: be.array(rng.standard_normal((6, 5, 8))) for k in ("x", "y", "z")}
    t["b"] = be.array(rng.standard_normal(8))
    t["g"] = be.array(rng.standard_normal((1, 8)))
    t["w"] = be.array(rng.standard_normal((5, 8)))
    return be, t


def _cases(be, t):
    x, y, z, b, g = t["x"], t["y"], t["z"], t["b"], t["g"]
    flat = x.reshape(30, 8)
    return [
        (x, y + z), (x, y - z), (x, y * z), (x, x + y), (x, y - x),
        (x, y + z + z), (x, y - z - y), (x, z + (y - z)), (x, x + y + z), (x, z - (x + y)),
        (g, g + be.sum(flat, axis=0)), (g, g - be.sum(flat, axis=0)), (g, g + b), (g, b - g),
    ]


def _column_sum(be, dtype):
    return lambda node: be._machine.leading_sum(node, np.dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_taken_trees_match_the_machine_and_numpy(dtype):
    be, t = _setup(dtype)
    for number in range(len(_cases(be, t))):
        results = []
        for way in ("ufunc", "machine", "numpy"):
            be, t = _setup(dtype)
            out, tree = _cases(be, t)[number]
            if way == "ufunc":
                assert run_ufuncs(out._ary, tree, _column_sum(be, dtype)), repr(tree)
            elif way == "machine":
                assert be._machine.run(out._ary, tree), repr(tree)
            else:
                evaluate(out._ary, tree)
            results.append(out.get())
        np.testing.assert_array_equal(results[0], results[1], err_msg=repr(tree))
        np.testing.assert_allclose(results[0], results[2], rtol=1e-6, err_msg=repr(tree))


@pytest.mark.parametrize("dtype", DTYPES)
def test_refused_trees_write_nothing(dtype):
    be, t = _setup(dtype)
    x, y, z, b = t["x"], t["y"], t["z"], t["b"]
    w = t["w"]
    refused = [y * 0.5, y + 1.0, y * z + b, be.sqrt(y), -y, (x + y) + x, x - (y + x),
               (y + z) * b, (y + z) + (z + y), y + be.max(z, axis=0), y + b, y + z + b,
               b - (y + z), y * w]
    joined = be.array(np.arange(6 * 5 * 16, dtype=dtype).reshape(6, 5, 16))
    right = joined[:, :, 8:]
    refused.insert(0, y + right)  # another layout than the output's: numpy would buffer it
    before = x.get()
    for tree in refused:
        assert not run_ufuncs(x._ary, tree, _column_sum(be, dtype)), repr(tree)
        np.testing.assert_array_equal(x.get(), before)
    line = be.array(np.arange(31, dtype=dtype))
    head, tail = line[:30], line[1:]
    before = line.get()  # same layout, overlapping ranges: numpy would copy the operand
    assert not run_ufuncs(tail._ary, head + tail, _column_sum(be, dtype))
    np.testing.assert_array_equal(line.get(), before)
    wide = be.array(np.ones((6, 5, 9)))
    assert not run_ufuncs(x._ary, y + wide, _column_sum(be, dtype))
    big = be.zeros((MAX_ELEMENTS + 1,))
    assert not run_ufuncs(big._ary, big + big, _column_sum(be, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_taken_trees_allocate_nothing(dtype):
    """A broadcasting numpy ufunc allocates an iteration buffer per call; the trees taken here
    must not, so a training step after the first stays allocation-free."""
    be, t = _setup(dtype)
    column_sum = _column_sum(be, dtype)
    for out, tree in _cases(be, t):
        assert run_ufuncs(out._ary, tree, column_sum), repr(tree)
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            assert run_ufuncs(out._ary, tree, column_sum), repr(tree)
            peak = tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()
        assert peak < 4096, f"{tree!r}: the ufunc path allocated {peak} bytes (a buffer?)"


def test_backend_assignment_uses_it_and_stays_exact():
    be, t = _setup(np.float32)
    x, y, z, b = t["x"], t["y"], t["z"], t["b"]
    expected = (y.get() + z.get()) + b.get()
    x[:] = y + z + b
    np.testing.assert_array_equal(x.get(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_root_leading_sum_uses_the_column_sum(dtype):
    """out[:] = sum(t, axis=0) (a joined bias gradient) equals the machine's column sum of t
    and numpy's sum; a sum over other axes still gives numpy's result."""
    be, t = _setup(dtype)
    flat = t["x"].reshape(30, 8)
    out = be.zeros((1, 8))
    out[:] = be.sum(flat, axis=0)
    expected = be._machine.leading_sum(be.sum(flat, axis=0), np.dtype(dtype)).copy()
    np.testing.assert_array_equal(out.get(), expected)
    np.testing.assert_allclose(out.get(), flat.get().sum(axis=0, keepdims=True), rtol=1e-5)
    rows = be.zeros((30, 1))
    rows[:] = be.sum(flat, axis=1)
    np.testing.assert_allclose(rows.get(), flat.get().sum(axis=1, keepdims=True), rtol=1e-5)
