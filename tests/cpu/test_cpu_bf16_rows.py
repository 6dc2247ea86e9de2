"""The small row ops of a transformer's step on bfloat16 tensors, run on their bits without a
float32 copy of the operands (``kernels/cpu/rows.c``'s ``*_bf16`` functions): the embedding
gather with ids stored in bf16, its gradient (``scatter_add_rows_bf16``), a bias or position
block added to every row (``add_row_bf16``) and a one-row product, the bias gradient
``ones @ dY`` (``row_combination_bf16``).

Bounds.  The gather moves bits (exact).  The scatter-add and the row add give the widening
path's bits exactly (the same float32 sums in the same order, rounded once).  The one-row
product sums M products of bf16 values (exact in float32) in float32, then rounds: against
the float64 sum s of the same values, |got - s| <= 2^-8 |s| + M 2^-24 sum |w b| (8 significant
bits of the rounding, M float32 additions), the tests' atol taken from the inputs."""
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.cpu import bf16, rows
from neonlite.backends.cpu.threads import openmp_threads, set_cpu_threads
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16

pytestmark = [requires("compiler"), pytest.mark.usefixtures("keep_backend")]

U_BF16 = 2.0 ** -8


def _backend():
    return neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype="bf16")


def _rounded(values):
    return bf16_to_f32(f32_to_bf16(np.asarray(values, dtype=np.float32)))


def _counted(monkeypatch, name, module=rows):
    """The calls of ``module.<name>`` (results) made from now on."""
    calls, original = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(original(*args, **kwargs))
        return calls[-1]
    monkeypatch.setattr(module, name, counted)
    return calls


def _no_table_widened(be, *names):
    widened = {key[0] for key in be.bf16_boundary._work}
    assert not widened & set(names), f"widened: {sorted(widened)}"


def test_take_rows_gathers_bits_with_bf16_ids():
    """Token ids stored in bf16 (the input of ``-d bf16`` training): the rows' bits are
    gathered, only the ids are widened; an id out of the table is one IndexError naming it."""
    be = _backend()
    rng = np.random.default_rng(0)
    table = be.array(rng.normal(size=(97, 131)))
    ids = be.array(rng.integers(0, 97, size=(7, 13)))
    out = be.empty((7, 13, 131))
    be.take_rows(table, ids, out)
    np.testing.assert_array_equal(out._ary, table._ary[ids.get().astype(np.int64)])
    assert {key[0] for key in be.bf16_boundary._work} == {("take_rows", "ids")}
    with pytest.raises(IndexError, match="97"):
        be.take_rows(table, be.array(np.full((7, 13), 97.0)), out)


def _scatter_case(be, V=41, n=301, D=517, seed=1):
    rng = np.random.default_rng(seed)
    grad = be.array(rng.normal(size=(V, D)))
    ids = be.array(rng.integers(0, V, size=(n,)), dtype=np.int32)
    src = be.array(rng.normal(size=(n, D)) * 3.0)
    return grad, ids, src


def test_scatter_add_rows_gives_the_widening_paths_bits(monkeypatch):
    """Repeated ids, each table row rounded once: the bits of widening the table and the
    rows, the float32 scatter-add in id order, and narrowing; the table is not widened."""
    be = _backend()
    calls = _counted(monkeypatch, "scatter_add_rows_bf16_kernel", bf16)
    grad, ids, src = _scatter_case(be)
    want = bf16_to_f32(grad._ary).copy()
    for i, row in enumerate(ids.get().astype(np.int64)):
        want[row] += bf16_to_f32(src._ary[i])
    be.scatter_add_rows(grad, ids, src)
    assert calls == [True]
    np.testing.assert_array_equal(grad._ary, f32_to_bf16(want))
    _no_table_widened(be, ("scatter_add_rows", "grad_table"), ("scatter_add_rows", "rows"))


def test_scatter_add_rows_bf16_is_bit_identical_on_1_2_and_3_threads():
    threads, results = openmp_threads(), []
    try:
        for n in (1, 2, 3):
            set_cpu_threads(n)
            be = _backend()
            grad, ids, src = _scatter_case(be, V=5, n=997)
            be.scatter_add_rows(grad, ids, src)
            results.append(grad._ary.copy())
    finally:
        set_cpu_threads(threads)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


@pytest.mark.parametrize("row_shape", [(131,), (13, 131)], ids=["bias", "positions"])
def test_a_row_added_to_every_row_is_the_op_tree_machines_sum(monkeypatch, row_shape):
    """``out[:] = x + row`` on bf16 (a bias (C,), a position block (T, C)) by ``add_row_bf16``:
    the float32 sum of the widened values rounded once, as the op-tree machine's bf16 store;
    also into x itself."""
    be = _backend()
    calls = _counted(monkeypatch, "_add_row_call")
    rng = np.random.default_rng(2)
    x, row = be.array(rng.normal(size=(7, 13, 131))), be.array(rng.normal(size=row_shape))
    out = be.empty((7, 13, 131))
    out[:] = x + row
    assert calls and calls[0] is not None, "add_row took the bf16 arrays"
    want = f32_to_bf16(bf16_to_f32(x._ary) + bf16_to_f32(row._ary))
    np.testing.assert_array_equal(out._ary, want)
    x[:] = x + row
    np.testing.assert_array_equal(x._ary, want)
    assert not be.bf16_boundary._work


def _row_product_case(be, M, K, seed=3):
    rng = np.random.default_rng(seed)
    return (be.array(rng.normal(size=shape)) for shape in ((1, M), (M, K), (1, K)))


@pytest.mark.parametrize("M, K", [(301, 517), (2053, 37), (5, 3)])
def test_one_row_product_is_a_sum_of_bf16_rows(monkeypatch, M, K):
    """compound_dot(w (1, M), B (M, K), C (1, K), alpha, beta): the weighted sum of B's rows
    in one pass over its bits (``row_combination_bf16``), within the module docstring's bound
    of the float64 product."""
    be = _backend()
    calls = _counted(monkeypatch, "row_combination_bf16_kernel", bf16)
    w, b, c = _row_product_case(be, M, K)
    wv, bv, cv = (t.get().astype(np.float64) for t in (w, b, c))
    be.compound_dot(w, b, c, alpha=0.5, beta=1.0)
    assert calls == [True]
    assert not be.bf16_boundary._work, "no operand widened"
    exact = 0.5 * wv @ bv + cv
    spread = 0.5 * np.abs(wv) @ np.abs(bv) + np.abs(cv)
    np.testing.assert_array_less(np.abs(c.get() - exact),
                                 U_BF16 * np.abs(exact) + (M + 2) * 2.0 ** -24 * spread + 1e-30)


def test_one_row_product_does_not_read_c_where_beta_is_0():
    be = _backend()
    w, b, c = _row_product_case(be, 64, 600)
    c[:] = float("nan")
    be.compound_dot(w, b, c)
    assert np.isfinite(c.get()).all()


@pytest.mark.parametrize("M, K", [(211, 1031), (2053, 37), (700, 300)])
def test_one_row_product_is_bit_identical_on_1_2_and_3_threads(M, K):
    """Threads split the columns (K 1031: five chunks) and, where the columns make few
    tasks (K 37, K 300), fixed blocks of rows too: the same bits on any thread count."""
    threads, results = openmp_threads(), []
    try:
        for n in (1, 2, 3):
            set_cpu_threads(n)
            be = _backend()
            w, b, c = _row_product_case(be, M, K)
            be.compound_dot(w, b, c, beta=1.0)
            results.append(c._ary.copy())
    finally:
        set_cpu_threads(threads)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
