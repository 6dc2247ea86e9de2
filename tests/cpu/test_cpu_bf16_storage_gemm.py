"""The bf16 storage path's fused GEMM (``kernels/cpu/bf16/gemm_storage.c``): float32 FMA on
operands stored as bf16 or float32, widened while packed, the result rounded to bf16 in the
epilogue (``backends/cpu/bf16_kernels.py`` ``gemm_storage_fused``).

The bound.  The inputs are widened exactly, so against the float64 product of the values the
kernel reads, only float32 arithmetic rounds: each output element is a sum of K products
formed by FMA (one rounding each), k blocks of ``NL_KC`` added into C, then alpha and beta, at
most r = K + ceil(K / kc) + 3 roundings of u = 2^-24, so (first order in u)

    |C - C_exact| <= r u sum_k |a_ik| |b_kj| + u |beta C_ij|                    (BOUND)

and a bf16 output is C rounded to nearest even, the bits ``f32_to_bf16`` gives for C (checked
exactly where both are written; where only the bits are written, within BOUND plus half a bf16
ulp, 2^-8 |C| relative).
"""
import numpy as np
import pytest

import neonlite
from neonlite.backends.cpu import bf16 as bf16_ops
from neonlite.backends.cpu.bf16_kernels import gemm_storage_fused, storage_isa, \
    storage_module
from neonlite.backends.reference.optree import bf16_to_f32, f32_to_bf16
from support.requires import requires

pytestmark = requires("compiler", "storage_gemm")

U = 2.0 ** -24
U_BF16 = 2.0 ** -8
#: (m, n, k): none a multiple of a micro-tile (AVX-512 12 x 32, AVX2 6 x 16), of 16 or 32; k up
#: to one block and past it (several k blocks summed through C)
SHAPES = [(13, 37, 5), (1, 1, 1), (1, 45, 300), (37, 45, 29), (97, 129, 257), (100, 70, 1031)]
PRODUCTS = {"forward": (False, False), "input_grad": (False, True), "weight_grad": (True, False),
            "both": (True, True)}
KINDS = [("bf16", "bf16"), ("bf16", "f32"), ("f32", "bf16"), ("f32", "f32")]


@pytest.fixture(scope="module")
def module():
    return storage_module(neonlite.gen_backend("cpu", batch_size=4).kernels)[0]


def _operand(rng, shape, kind, pad=3):
    """(array the kernel reads, its float64 value): bf16 bits or float32, rows strided past
    their length by ``pad`` elements."""
    full = rng.standard_normal((shape[0], shape[1] + pad)).astype(np.float32)
    if kind == "bf16":
        bits = f32_to_bf16(full)[:, :shape[1]]
        return bits, bf16_to_f32(bits).astype(np.float64)
    return full[:, :shape[1]], full[:, :shape[1]].astype(np.float64)


def _problem(rng, m, n, k, kinds, trans_a, trans_b):
    a, av = _operand(rng, (k, m) if trans_a else (m, k), kinds[0])
    b, bv = _operand(rng, (n, k) if trans_b else (k, n), kinds[1])
    op = lambda x, t: x.T if t else x  # noqa: E731
    return a, b, op(av, trans_a) @ op(bv, trans_b), np.abs(op(av, trans_a)) @ np.abs(
        op(bv, trans_b))


@pytest.mark.parametrize("kinds", KINDS, ids=["-".join(k) for k in KINDS])
@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_float32_and_bf16_results_within_the_bound(module, kinds, product, m, n, k):
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b, exact, size = _problem(rng, m, n, k, kinds, trans_a, trans_b)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c, bits = c0.copy(), np.zeros((m, n), np.uint16)
    gemm_storage_fused(module, a, b, c, bits, 0.5, 0.25, trans_a, trans_b)
    want = 0.5 * exact + 0.25 * c0
    r = k + -(-k // module.lib.nl_gemm_storage_kc()) + 3
    assert np.all(np.abs(c - want) <= r * U * 0.5 * size + U * np.abs(0.25 * c0) + 1e-30)
    np.testing.assert_array_equal(bits, f32_to_bf16(c))


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("m,n,k", [s for s in SHAPES if s[2] <= 256])
def test_bf16_output_alone_reads_its_old_bits_for_beta(module, product, m, n, k):
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(k)
    a, b, exact, size = _problem(rng, m, n, k, ("bf16", "f32"), trans_a, trans_b)
    old = f32_to_bf16(rng.standard_normal((m, n)).astype(np.float32))
    bits = old.copy()
    gemm_storage_fused(module, a, b, None, bits, 1.0, -1.5, trans_a, trans_b)
    want = exact - 1.5 * bf16_to_f32(old)
    got = bf16_to_f32(bits)
    bound = (k + 4) * U * (size + 1.5 * np.abs(bf16_to_f32(old))) + U_BF16 * np.abs(got)
    assert np.all(np.abs(got - want) <= bound)


def test_bf16_output_alone_is_refused_past_one_k_block(module):
    k = module.lib.nl_gemm_storage_kc() + 1
    a = np.zeros((3, k), np.uint16)
    b = np.zeros((k, 5), np.uint16)
    with pytest.raises(RuntimeError, match="refused"):
        gemm_storage_fused(module, a, b, None, np.zeros((3, 5), np.uint16))


@pytest.mark.parametrize("m", [301, 1])
@pytest.mark.parametrize("product", PRODUCTS)
def test_bit_identical_on_1_2_3_threads(module, product, m):
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(5)
    a, b, _, _ = _problem(rng, m, 259, 700, ("bf16", "bf16"), trans_a, trans_b)
    results = []
    for threads in (1, 2, 3):
        c = np.ones((m, 259), np.float32)
        bits = np.zeros((m, 259), np.uint16)
        gemm_storage_fused(module, a, b, c, bits, 1.0, 0.5, trans_a, trans_b, threads)
        results.append((c, bits))
    for c, bits in results[1:]:
        np.testing.assert_array_equal(c, results[0][0])
        np.testing.assert_array_equal(bits, results[0][1])


def test_a_kept_area_holds_the_packing_buffers(module):
    """With an area (as the backend passes its shared one), the kernel packs into it instead
    of allocating buffers of its own: an area of ``nl_gemm_storage_work_bytes`` is enough (it
    does not grow), it is written, and the result is the same bits."""
    from neonlite.backends.cpu.bf16_packed import SharedArea
    rng = np.random.default_rng(8)
    a, b, _, _ = _problem(rng, 97, 300, 600, ("bf16", "f32"), True, False)
    for threads in (1, 2, 3):
        fresh, kept = np.zeros((97, 300), np.float32), np.zeros((97, 300), np.float32)
        gemm_storage_fused(module, a, b, fresh, None, 1.0, 0.0, True, False, threads)
        area = SharedArea()
        area.ensure(module.ffi, -(-module.lib.nl_gemm_storage_work_bytes(97, 300, threads) // 4))
        held = area.array
        held.view(np.uint32)[:] = 0xFFFFFFFF
        gemm_storage_fused(module, a, b, kept, None, 1.0, 0.0, True, False, threads, area)
        assert area.array is held and (held.view(np.uint32) != 0xFFFFFFFF).any()
        np.testing.assert_array_equal(kept, fresh)


def test_a_work_area_off_a_cache_line_is_refused(module):
    from neonlite.backends.cpu.tensor import aligned_empty
    ffi, lib = module.ffi, module.lib
    a, b = np.zeros((4, 5), np.float32), np.zeros((5, 3), np.float32)
    c = np.zeros((4, 3), np.float32)
    work = aligned_empty((lib.nl_gemm_storage_work_bytes(4, 3, 1) // 4 + 16,), np.float32)
    args = (ffi.cast("void *", a.ctypes.data), 0, ffi.cast("void *", b.ctypes.data), 0,
            ffi.cast("float *", c.ctypes.data), ffi.NULL, 4, 3, 5, 5, 3, 3, 0, 0, 0, 1.0, 0.0, 1)
    assert lib.nl_gemm_storage(*args, ffi.cast("void *", work.ctypes.data)) == 0
    assert lib.nl_gemm_storage(*args, ffi.cast("void *", work.ctypes.data + 4)) == -4


def test_k_zero_scales_the_old_result(module):
    c = np.full((4, 5), 2.0, np.float32)
    bits = np.zeros((4, 5), np.uint16)
    gemm_storage_fused(module, np.zeros((4, 0), np.uint16), np.zeros((0, 5), np.float32), c,
                       bits, 1.0, 0.5)
    assert np.all(c == 1.0) and np.all(bits == f32_to_bf16(np.float32(1.0)))


def test_nan_rounds_to_the_quiet_nan_and_inf_stays(module):
    a = f32_to_bf16(np.array([[np.nan, 0.0], [np.inf, 0.0]], np.float32))
    b = f32_to_bf16(np.ones((2, 3), np.float32))
    bits = np.zeros((2, 3), np.uint16)
    gemm_storage_fused(module, a, b, None, bits)
    assert np.all(bits[0] == 0x7FC0) and np.all(bits[1] == 0x7F80)


def _bf16_tensor(be, x):
    t = be.empty(x.shape)
    t[:] = x
    return t


@pytest.fixture
def storage_be(monkeypatch, module):
    """A bf16 CPU backend whose products take the storage path on the fused GEMM, whatever was
    measured here and whichever float32 GEMM it has."""
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    monkeypatch.setattr(type(be), "bf16_path", lambda self, op_class="gemm": "storage")
    monkeypatch.setattr(bf16_ops, "fused_storage_module",
                        lambda modules: storage_module(modules)[0])
    return be


def test_the_storage_path_keeps_mkls_sgemm_where_the_float32_gemm_is_mkl():
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    is_mkl = type(be.kernels.gemm).__name__ == "MKLGemm"
    assert (be.storage_gemm() is None) == is_mkl


def test_compound_dot_on_bf16_tensors_runs_the_fused_gemm_in_kept_buffers(storage_be, module):
    """No float32 work tensor, and the packing buffers in the backend's shared work area,
    which the next product of the shape does not grow."""
    be = storage_be
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 29)).astype(np.float32)
    w = rng.standard_normal((29, 45)).astype(np.float32)
    X, W = _bf16_tensor(be, x), _bf16_tensor(be, w)
    exact = bf16_to_f32(f32_to_bf16(x)).astype(np.float64) @ bf16_to_f32(
        f32_to_bf16(w)).astype(np.float64)
    size = np.abs(bf16_to_f32(f32_to_bf16(x))) @ np.abs(bf16_to_f32(f32_to_bf16(w)))
    Y = be.empty((37, 45))
    be.compound_dot(X, W, Y)
    got = Y.get().astype(np.float64)
    assert np.all(np.abs(got - exact) <= U_BF16 * np.abs(exact) + 40 * U * size)
    assert not [key for key in be.bf16_boundary._work if key[0][0] == "compound_dot"]
    area = be.kernels.workspaces[("bf16_packed_area", "work")]
    held = area.array
    assert held.size * 4 >= module.lib.nl_gemm_storage_work_bytes(37, 45, 0) > 0
    be.compound_dot(X, W, Y)
    assert area.array is held
    np.testing.assert_array_equal(Y.get(), got.astype(np.float32))


def test_without_its_isa_the_storage_path_takes_another_gemm_as_exact(storage_be, module,
                                                                         monkeypatch):
    """The micro-kernel -march=native compiled (AVX-512, or AVX2 where the CPU has no AVX-512)
    turned off: the module is not used, and the other GEMM gives the same product."""
    be = storage_be
    isa = storage_isa(module)
    assert isa in ("AVX-512", "AVX2")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((13, 300)).astype(np.float32)
    w = rng.standard_normal((300, 17)).astype(np.float32)
    X, W = _bf16_tensor(be, x), _bf16_tensor(be, w)
    fused, other = be.empty((13, 17)), be.empty((13, 17))
    be.compound_dot(X, W, fused)
    monkeypatch.setenv("NEONLITE_CPU_FEATURES_OFF", "avx512f" if isa == "AVX-512" else "avx2")
    assert be.storage_gemm() is None
    assert storage_module(be.kernels)[0] is None

    def refused(*args, **kwargs):
        raise AssertionError(f"the fused GEMM ran with {isa} turned off")
    monkeypatch.setattr(bf16_ops, "gemm_storage_fused", refused)
    be.compound_dot(X, W, other)
    np.testing.assert_allclose(other.get(), fused.get(), rtol=2 * U_BF16, atol=1e-6)


def test_the_choice_names_what_the_storage_products_run_on(monkeypatch):
    """``neonlite doctor``'s bf16 row says which GEMM the storage path's products take: MKL's
    packed GEMM where the float32 GEMM is MKL's, the fused GEMM with its ISA elsewhere."""
    monkeypatch.setenv("NEONLITE_BF16", "storage")
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    reason = be.bf16_choice().reasons["gemm"]
    assert reason.startswith("NEONLITE_BF16=storage; products: "), reason
    if type(be.kernels.gemm).__name__ == "MKLGemm":
        assert "MKL's packed GEMM" in reason
    else:
        isa = storage_isa(storage_module(be.kernels)[0])
        assert f"the fused storage GEMM ({isa})" in reason
