"""The bf16 storage path's GEMM on MKL's packed GEMM (``kernels/cpu/bf16/gemm_packed.c``,
``backends/cpu/bf16_packed.py``): one operand widened and packed a chunk at a time, the other
widened a strip at a time, the result rounded to bf16 from each float32 tile.

The bound.  The operands are widened exactly, so against the float64 product of the values the
kernel reads only MKL's float32 arithmetic rounds: a sum of K products in any order and
grouping (MKL chooses its own) has first-order error at most K u sum_k |a_ik| |b_kj| (u =
2^-24); alpha = 0.5 is exact in the packing and beta C adds at most two roundings, so

    |C - C_exact| <= (K + 3) u sum_k |a_ik| |b_kj| + 2 u |beta C_ij|              (BOUND)

and a bf16 result is the float32 tile rounded to nearest even: within BOUND plus half a bf16
ulp, at most 2^-8 |C| relative.
"""
import numpy as np
import pytest

import neonlite
from neonlite.backends.cpu import bf16 as bf16_ops
from neonlite.backends.cpu import bf16_choice
from neonlite.backends.cpu.bf16_packed import gemm_storage_packed, packed_storage_module, \
    prepare_storage_packed, shared_area_arrays
from neonlite.backends.reference.optree import bf16_to_f32, f32_to_bf16
from support.requires import need, requires

pytestmark = requires("compiler", "mkl")

U = 2.0 ** -24
U_BF16 = 2.0 ** -8
#: (m, n, k): none a multiple of 16 or 32; more than one chunk (512 columns of op(B), 256
#: rows of op(A)) and more than one strip (at most 256) where both are past them
SHAPES = [(13, 37, 5), (1, 1, 1), (1, 45, 300), (37, 45, 29), (97, 129, 257), (100, 70, 1031),
          (301, 555, 77), (555, 301, 77)]
PRODUCTS = {"forward": (False, False), "input_grad": (False, True), "weight_grad": (True, False),
            "both": (True, True)}


@pytest.fixture(scope="module")
def kernels():
    return neonlite.gen_backend("cpu", batch_size=4).kernels


@pytest.fixture(scope="module")
def module(kernels):
    found = packed_storage_module(kernels)
    assert found is not None, "MKL is loaded but the gemm_packed kernel did not build"
    return found


def _operand(rng, shape, pad=3):
    """(bf16 bits with rows strided past their length by ``pad``, their float64 value)."""
    bits = f32_to_bf16(rng.standard_normal((shape[0], shape[1] + pad)).astype(np.float32))
    return bits[:, :shape[1]], bf16_to_f32(bits[:, :shape[1]]).astype(np.float64)


def _problem(rng, m, n, k, trans_a, trans_b):
    a, av = _operand(rng, (k, m) if trans_a else (m, k))
    b, bv = _operand(rng, (n, k) if trans_b else (k, n))
    op = lambda x, t: x.T if t else x  # noqa: E731
    return a, b, op(av, trans_a) @ op(bv, trans_b), np.abs(op(av, trans_a)) @ np.abs(
        op(bv, trans_b))


@pytest.mark.parametrize("packed", ["A", "B"])
@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_float32_result_within_the_bound(kernels, module, packed, product, m, n, k):
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b, exact, size = _problem(rng, m, n, k, trans_a, trans_b)
    c0 = rng.standard_normal((m, n + 2)).astype(np.float32)
    c = c0.copy()
    gemm_storage_packed(kernels, module, a, b, c[:, :n], None, 0.5, 0.25, trans_a, trans_b,
                        packed=packed)
    want = 0.5 * exact + 0.25 * c0[:, :n]
    assert np.all(np.abs(c[:, :n] - want) <= (k + 3) * U * 0.5 * size +
                  2 * U * np.abs(0.25 * c0[:, :n]) + 1e-30)
    np.testing.assert_array_equal(c[:, n:], c0[:, n:])


@pytest.mark.parametrize("packed", ["A", "B"])
@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("beta", [0.0, -1.5])
def test_bf16_result_within_the_bound_reading_its_old_bits(kernels, module, packed, product,
                                                           m, n, k, beta):
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(k * 13 + m)
    a, b, exact, size = _problem(rng, m, n, k, trans_a, trans_b)
    old = f32_to_bf16(rng.standard_normal((m, n)).astype(np.float32))
    old[0, 0] = 0x7FC0  # a NaN in C must not leak through beta = 0
    bits = old.copy()
    gemm_storage_packed(kernels, module, a, b, None, bits, 1.0, beta, trans_a, trans_b,
                        packed=packed)
    old_value = np.nan_to_num(bf16_to_f32(old)) if beta == 0.0 else bf16_to_f32(old)
    want = exact + beta * old_value
    got = bf16_to_f32(bits)
    bound = (k + 3) * U * size + 2 * U * np.abs(beta * old_value) + U_BF16 * np.abs(got)
    if beta != 0.0:
        assert np.isnan(got[0, 0])
        got, want, bound = got.ravel()[1:], want.ravel()[1:], bound.ravel()[1:]
    assert np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize("packed", ["A", "B"])
@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("m,n,k", [(601, 559, 700), (200, 300, 700)])
def test_bit_identical_on_1_2_3_threads(kernels, module, packed, product, m, n, k):
    """Several chunks of the packed operand; or one, packed in two parts of k (k >= 512) on
    two threads at once."""
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(5)
    a, b, _, _ = _problem(rng, m, n, k, trans_a, trans_b)
    results = []
    for threads in (1, 2, 3):
        bits = f32_to_bf16(np.ones((m, n), np.float32))
        c = np.ones((m, n), np.float32)
        gemm_storage_packed(kernels, module, a, b, None, bits, 1.0, 0.5, trans_a, trans_b,
                            packed=packed, threads=threads)
        gemm_storage_packed(kernels, module, a, b, c, None, 1.0, 0.5, trans_a, trans_b,
                            packed=packed, threads=threads)
        results.append((c, bits))
    parts = kernels.workspaces[("bf16_packed", m, n, k, packed, 3)][-1]
    assert parts == (2 if (m, n) == (200, 300) else 1)
    for c, bits in results[1:]:
        np.testing.assert_array_equal(c, results[0][0])
        np.testing.assert_array_equal(bits, results[0][1])


def test_k_zero_scales_the_old_result(kernels, module):
    c = np.full((4, 5), 2.0, np.float32)
    bits = f32_to_bf16(c)
    gemm_storage_packed(kernels, module, np.zeros((4, 0), np.uint16),
                        np.zeros((0, 5), np.uint16), c, None, 1.0, 0.5)
    gemm_storage_packed(kernels, module, np.zeros((4, 0), np.uint16),
                        np.zeros((0, 5), np.uint16), None, bits, 1.0, 0.5)
    assert np.all(c == 1.0) and np.all(bits == f32_to_bf16(np.float32(1.0)))


def test_nan_rounds_to_the_quiet_nan_and_inf_stays(kernels, module):
    a = f32_to_bf16(np.array([[np.nan, 0.0], [np.inf, 0.0]], np.float32))
    b = f32_to_bf16(np.ones((2, 3), np.float32))
    bits = np.zeros((2, 3), np.uint16)
    gemm_storage_packed(kernels, module, a, b, None, bits)
    assert np.all(bits[0] == 0x7FC0) and np.all(bits[1] == 0x7F80)


def _area_ids(kernels):
    return sorted(id(a) for a in shared_area_arrays(kernels))


def test_a_training_loop_allocates_its_packing_areas_once(kernels, module):
    rng = np.random.default_rng(3)
    a, b, _, _ = _problem(rng, 300, 200, 100, False, False)
    bits = np.zeros((300, 200), np.uint16)
    gemm_storage_packed(kernels, module, a, b, None, bits, threads=2)
    areas = _area_ids(kernels)
    assert len(areas) == 2
    gemm_storage_packed(kernels, module, a, b, None, bits, threads=2)
    assert _area_ids(kernels) == areas


def test_every_shape_shares_two_areas_and_a_kept_product_follows_them_as_they_grow():
    """Products of other shapes share the packed and the work area (MKL asks about 8 MB for
    any packed operand up to a chunk: an area per shape held that much for each); a product
    prepared before a larger one grew the areas runs on the grown ones, still exact."""
    kernels = neonlite.gen_backend("cpu", batch_size=4).kernels
    module = packed_storage_module(kernels)
    rng = np.random.default_rng(8)
    small = _problem(rng, 37, 45, 29, False, False)
    bits = np.zeros((37, 45), np.uint16)
    run = prepare_storage_packed(kernels, module, small[0], small[1], None, bits, threads=2)
    run(1.0, 0.0)
    first = bits.copy()
    before = [a.size for a in shared_area_arrays(kernels)]
    for m, n, k in ((301, 555, 77), (100, 70, 1031), (555, 301, 77)):
        big = _problem(rng, m, n, k, False, True)
        gemm_storage_packed(kernels, module, big[0], big[1], None,
                            np.zeros((m, n), np.uint16), trans_b=True, threads=2)
    assert len(shared_area_arrays(kernels)) == 2
    assert sum(a.size for a in shared_area_arrays(kernels)) > sum(before)
    bits[...] = 0
    run(1.0, 0.0)
    np.testing.assert_array_equal(bits, first)
    exact, scale = small[2], small[3]
    got = bf16_to_f32(bits).astype(np.float64)
    assert np.all(np.abs(got - exact) <= (29 + 3) * U * scale + U_BF16 * np.abs(got))


def _bf16_tensor(be, x):
    t = be.empty(x.shape)
    t[:] = x
    return t


def test_compound_dot_on_mkl_takes_the_packed_gemm_with_no_work_tensor(monkeypatch):
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    monkeypatch.setattr(type(be), "bf16_path", lambda self, op_class="gemm": "storage")
    assert be.storage_gemm() is None and be.storage_packed_gemm() is not None
    ran = []
    monkeypatch.setattr(bf16_ops, "prepare_storage_packed",
                        lambda *args, **kw: ran.append(1) or prepare_storage_packed(*args, **kw))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 29)).astype(np.float32)
    w = rng.standard_normal((45, 29)).astype(np.float32)
    X, W = _bf16_tensor(be, x), _bf16_tensor(be, w)
    xv, wv = (bf16_to_f32(f32_to_bf16(v)).astype(np.float64) for v in (x, w))
    Y = be.empty((37, 45))
    Y[:] = np.ones((37, 45), np.float32)
    be.compound_dot(X, W, Y, alpha=2.0, beta=1.0, transB=True)
    exact = 2.0 * xv @ wv.T + 1.0
    got = Y.get().astype(np.float64)
    assert ran == [1]
    assert np.all(np.abs(got - exact) <= U_BF16 * np.abs(got) +
                  40 * U * (2.0 * np.abs(xv) @ np.abs(wv.T) + 1.0))
    assert not [key for key in be.bf16_boundary._work if key[0][0] == "compound_dot"]


def test_a_kept_product_is_prepared_once_and_follows_its_arrays(monkeypatch):
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    monkeypatch.setattr(type(be), "bf16_path", lambda self, op_class="gemm": "storage")
    prepared = []
    monkeypatch.setattr(bf16_ops, "prepare_storage_packed",
                        lambda *args, **kw: prepared.append(1) or prepare_storage_packed(*args,
                                                                                        **kw))
    rng = np.random.default_rng(4)
    X = _bf16_tensor(be, rng.standard_normal((40, 24)).astype(np.float32))
    W = _bf16_tensor(be, rng.standard_normal((24, 33)).astype(np.float32))
    Y = be.empty((40, 33))
    for _ in range(3):
        be.compound_dot(X, W, Y)
    assert prepared == [1]
    first = Y.get().copy()
    X[:] = 2 * X.get()
    be.compound_dot(X, W, Y)
    np.testing.assert_array_equal(Y.get(), 2 * first)
    other = be.empty((40, 33))
    be.compound_dot(X, W, other)
    assert prepared == [1, 1]
    np.testing.assert_array_equal(other.get(), Y.get())


def test_a_kept_product_skips_no_check_of_other_operands(monkeypatch):
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    monkeypatch.setattr(type(be), "bf16_path", lambda self, op_class="gemm": "storage")
    rng = np.random.default_rng(6)
    X = _bf16_tensor(be, rng.standard_normal((40, 24)).astype(np.float32))
    W = _bf16_tensor(be, rng.standard_normal((24, 33)).astype(np.float32))
    be.compound_dot(X, W, be.empty((40, 33)))
    with pytest.raises(ValueError, match="compound_dot"):
        be.compound_dot(X, W, be.empty((40, 32)))
    with pytest.raises(ValueError, match="compound_dot"):
        be.compound_dot(X, W, be.empty((40, 33)), transB=True)


def test_a_kept_product_runs_while_its_choice_is_the_one_asked_last(monkeypatch):
    """A kept storage product is not run once the bf16 choice asked for last is another (the
    variables are read when a path is asked, not at every kept call), and is run again, not
    prepared again, when the choice it was made under is back."""
    need("bf16")
    monkeypatch.setenv(bf16_choice.ENV, "storage")
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    prepared, computed = [], []
    monkeypatch.setattr(bf16_ops, "prepare_storage_packed",
                        lambda *args, **kw: prepared.append(1) or prepare_storage_packed(*args,
                                                                                        **kw))
    kernel = bf16_ops.gemm_bf16
    monkeypatch.setattr(bf16_ops, "gemm_bf16",
                        lambda *args, **kw: computed.append(1) or kernel(*args, **kw))
    rng = np.random.default_rng(9)
    X = _bf16_tensor(be, rng.standard_normal((40, 24)).astype(np.float32))
    W = _bf16_tensor(be, rng.standard_normal((24, 33)).astype(np.float32))
    Y = be.empty((40, 33))
    be.compound_dot(X, W, Y)
    be.compound_dot(X, W, Y)
    assert (prepared, computed) == ([1], [])
    monkeypatch.setenv(bf16_choice.ENV, "compute")
    assert be.bf16_path("gemm") == "compute"
    be.compound_dot(X, W, Y)
    assert (prepared, computed) == ([1], [1])
    monkeypatch.setenv(bf16_choice.ENV, "storage")
    assert be.bf16_path("gemm") == "storage"
    be.compound_dot(X, W, Y)
    assert (prepared, computed) == ([1], [1])


def test_a_kept_bias_gradient_product_runs_before_the_check_with_its_own_scales(monkeypatch):
    """A one-row product (a bias gradient ones @ dY into bf16) is kept by its arrays and
    scales: its next call runs before the row's check, and other scales make a call of their
    own, each giving the sum it should."""
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    rng = np.random.default_rng(10)
    dy = bf16_to_f32(f32_to_bf16(rng.standard_normal((37, 21)).astype(np.float32)))
    ones, DY = _bf16_tensor(be, np.ones((1, 37), np.float32)), _bf16_tensor(be, dy)
    DB = be.zeros((1, 21))
    be.compound_dot(ones, DY, DB, beta=1.0)

    def refused(*args, **kwargs):
        raise AssertionError("the row's check ran for a kept call")
    monkeypatch.setattr(be.bf16_boundary, "checked", refused)
    be.compound_dot(ones, DY, DB, beta=1.0)
    want = 2.0 * dy.astype(np.float64).sum(0, keepdims=True)
    np.testing.assert_allclose(DB.get(), want, rtol=2 * U_BF16, atol=1e-5)
    monkeypatch.undo()
    be.compound_dot(ones, DY, DB, alpha=0.5, beta=0.0)
    want = 0.5 * dy.astype(np.float64).sum(0, keepdims=True)
    np.testing.assert_allclose(DB.get(), want, rtol=U_BF16, atol=1e-5)


def test_a_product_past_tiny_runs_the_way_mkls_tuner_measured(kernels, module, monkeypatch):
    monkeypatch.setattr("neonlite.backends.cpu.bf16_packed.openmp_threads", lambda: 2)
    rng = np.random.default_rng(8)
    a, b, exact, size = _problem(rng, 130, 120, 110, False, False)
    bits = np.zeros((130, 120), np.uint16)
    run = prepare_storage_packed(kernels, module, a, b, None, bits)
    key = ("bf16 packed", 130, 120, 110, False, False, "B")
    for _ in range(6):
        run(1.0, 0.0)
    assert kernels.gemm.tuner.choices[key] in ("one", "all")
    got = bf16_to_f32(bits)
    assert np.all(np.abs(got - exact) <= 113 * U * size + U_BF16 * np.abs(got))
