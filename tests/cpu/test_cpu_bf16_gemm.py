"""The bf16 kernels of the CPU backend (``kernels/cpu/bf16/``, ``backends/cpu/bf16*.py``).

The bound.  Let a~, b~ be the inputs rounded to bf16 (8 significant bits, round to nearest
even: relative error at most u_bf16 = 2^-8 each; half an ulp of 1 + 2^-7 spacing) and
u = 2^-24 float32's unit roundoff.  A product of two bf16 values has at most 16 significant
bits, so VDPBF16PS / TDPBF16PS form it exactly in float32; what rounds is the float32 sum of
K such terms, the sum of each k block (``NL_KC``) into C, and the alpha / beta step, at most
r = K + ceil(K / 512) + 3 roundings, so (first order in u)

    |C - C(a~, b~)| <= r u sum_k |a~_ik| |b~_kj| + u |beta C_ij|        (BOUND_ROUNDED)

against the exact (float64) product of the rounded inputs, and against the float32 inputs
themselves, whose products the rounding moves by at most (1 + 2^-8)^2 - 1 = 2^-7 + 2^-16,

    |C - C(a, b)| <= (2^-7 + 2^-16 + r u) sum_k |a_ik| |b_kj| + u |beta C_ij|    (BOUND_INPUT)

(a per-input bound of 2^-9 would be half of what round-to-nearest to 8 bits gives; the test of
the bound's tightness below finds errors above it).  Both paths meet both bounds: the
storage path (widened exactly, float32 GEMM) rounds no more than the compute path does.
The instructions flush denormals, so the inputs here are normal numbers.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import neonlite
from neonlite.backends.cpu import bf16 as bf16_ops
from neonlite.backends.cpu import bf16_choice
from neonlite.backends.cpu.bf16_kernels import gemm_bf16, gemm_module
from neonlite.backends.reference.optree import bf16_to_f32, f32_to_bf16
from neonlite.kernels import cpu_features
from support.requires import need, requires

pytestmark = requires("compiler")

U = 2.0 ** -24
U_BF16 = 2.0 ** -8
#: (m, n, k): none a multiple of the micro-tile (12 x 32), of 16 or of 32; k past one k block
SHAPES = [(37, 45, 29), (13, 1, 3), (1, 33, 17), (97, 65, 515), (100, 70, 1031)]
#: the three products of a Linear layer: forward X @ W, input gradient dY @ W^T, weight
#: gradient X^T @ dY
PRODUCTS = {"forward": (False, False), "input_grad": (False, True), "weight_grad": (True, False)}


@pytest.fixture(scope="module")
def be():
    return neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)


#: the paths a product is checked on: ``compute`` on this CPU's bf16 kernel (skips without
#: one), ``amx_emulated`` the compute path on the AMX kernel's code with its tile instructions
#: done in C (``kernels/cpu/bf16/amx_emulated.h``: every CPU), and ``storage``
PATHS = ["compute", "amx_emulated", "storage"]


@pytest.fixture
def on_path(be, monkeypatch):
    """``on_path(path)``: the ``path`` argument of ``dot_bf16`` that runs ``path`` of
    :data:`PATHS` (``amx_emulated``: ``compute``, with the emulated AMX module as this
    backend's bf16 GEMM)."""
    def use(path):
        if path == "compute":
            need("bf16")
        if path != "amx_emulated":
            return path
        module = be.kernels.variant("gemm_bf16_amx_emulated")
        monkeypatch.setattr(bf16_ops, "gemm_module", lambda modules: (module, "AMX emulated"))
        return "compute"
    return use


def _operands(rng, m, n, k, trans_a, trans_b, pad=0):
    """float32 operands of op(A) (m, k) @ op(B) (k, n), as arrays with ``pad`` extra columns
    (row strides longer than the rows) sliced off."""
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (n, k) if trans_b else (k, n)
    a = rng.standard_normal((a_shape[0], a_shape[1] + pad)).astype(np.float32)
    b = rng.standard_normal((b_shape[0], b_shape[1] + pad)).astype(np.float32)
    return a[:, :a_shape[1]], b[:, :b_shape[1]]


def _exact(a, b, trans_a, trans_b):
    """(exact product of the bf16-rounded inputs, sum_k |a~||b~|, exact product of the float32
    inputs, sum_k |a||b|), in float64."""
    op = lambda x, t: (x.T if t else x).astype(np.float64)  # noqa: E731
    ar, br = bf16_to_f32(f32_to_bf16(a)), bf16_to_f32(f32_to_bf16(b))
    return (op(ar, trans_a) @ op(br, trans_b), np.abs(op(ar, trans_a)) @ np.abs(op(br, trans_b)),
            op(a, trans_a) @ op(b, trans_b), np.abs(op(a, trans_a)) @ np.abs(op(b, trans_b)))


def test_casts_round_to_nearest_even_as_the_reference(be):
    rng = np.random.default_rng(1)
    values = np.concatenate([
        rng.standard_normal(100_003).astype(np.float32),
        # ties: a bf16 value plus exactly half an ulp, both parities of the kept bit
        ((np.arange(1000, dtype=np.uint32) << 16) | 0x8000).view(np.float32) + 0,
        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 1e-40, 1.5e-45],
                 np.float32)])
    bits = be.to_bf16(values)
    assert bits.dtype == np.uint16
    assert np.array_equal(bits, f32_to_bf16(values))
    assert np.array_equal(be.from_bf16(bits).view(np.uint32), bf16_to_f32(bits).view(np.uint32))
    ties = be.to_bf16(np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8], np.float32))
    assert ties.tolist() == [0x3F80, 0x3F82]  # ties to even: down, then up


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("product", sorted(PRODUCTS))
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_products_within_the_bf16_bound(be, on_path, path, product, m, n, k):
    """Both bounds of the module docstring, for alpha/beta pairs, row strides past the rows."""
    run_path = on_path(path)
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b = _operands(rng, m, n, k, trans_a, trans_b, pad=3)
    for alpha, beta in ((1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)):
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        c = c0.copy()
        abits, bbits = be.to_bf16(a), be.to_bf16(b)
        be.dot_bf16(abits, bbits, c, alpha, beta, trans_a, trans_b, path=run_path)
        rounded, scale_r, exact, scale = _exact(a, b, trans_a, trans_b)
        r = k + -(-k // 512) + 3
        # the sum's roundings, then those of alpha * sum, beta * C and their sum
        step = 2 * U * np.abs(beta * c0) + 2 * U * np.abs(alpha * rounded + beta * c0)
        bound_r = 1.01 * abs(alpha) * r * U * scale_r + step
        bound = 1.01 * abs(alpha) * (2 * U_BF16 + U_BF16 ** 2 + r * U) * scale + step
        over = np.abs(c - (alpha * rounded + beta * c0)) - bound_r
        assert over.max() <= 0, f"{path} {product} alpha {alpha} beta {beta}: over " \
            f"BOUND_ROUNDED by {over.max()}"
        assert np.all(np.abs(c - (alpha * exact + beta * c0)) <= bound)


def test_the_bound_is_not_loose_by_a_factor_of_two(be):
    """Errors against the float32 inputs come near 2^-7 relative per term: a 2^-9 per-input
    bound (2^-8 per product) would not hold."""
    rng = np.random.default_rng(5)
    a = (1.0 + rng.random((64, 1)) * 2 ** -7).astype(np.float32)
    b = np.ones((1, 64), np.float32) + np.float32(2 ** -8) * 0.999
    c = np.zeros((64, 64), np.float32)
    be.dot_bf16(be.to_bf16(a), be.to_bf16(b), c, path="storage")
    relative = np.abs(c - a.astype(np.float64) @ b.astype(np.float64)) / np.abs(a @ b)
    assert relative.max() > 2 ** -8 and relative.max() <= 2 * U_BF16 + U_BF16 ** 2


@pytest.mark.parametrize("kernel", ["native", "amx_emulated"])
@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_compute_path_is_bit_identical_on_1_2_3_threads(be, product, kernel):
    if kernel == "native":
        need("bf16")
        module, _ = gemm_module(be.kernels)
    else:
        module = be.kernels.variant("gemm_bf16_amx_emulated")
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(11)
    m, n, k = 203, 517, 1100
    a, b = _operands(rng, m, n, k, trans_a, trans_b)
    abits, bbits = be.to_bf16(a), be.to_bf16(b)
    results = []
    for threads in (1, 2, 3):
        c = np.full((m, n), 0.5, np.float32)
        gemm_bf16(module, abits, bbits, c, 1.0, 0.5, trans_a, trans_b, threads)
        results.append(c.view(np.uint32).copy())
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], results[2])


def _amx_order(a, b, c, alpha, beta, trans_a, trans_b, kc=512):
    """The AMX kernel's result in float32 as its documented order makes it: each block of
    ``kc`` k summed from zero in k order (TDPBF16PS adds each pair's even product, then its odd
    one; products of bf16 values are exact), alpha times that added to C (the first block:
    to beta times C)."""
    op = lambda x, t: bf16_to_f32(x.T if t else x)  # noqa: E731
    wa, wb = op(a, trans_a), op(b, trans_b)
    alpha, beta, c = np.float32(alpha), np.float32(beta), c.copy()
    for k0 in range(0, wa.shape[1], kc):
        block = np.zeros(c.shape, np.float32)
        for k in range(k0, min(k0 + kc, wa.shape[1])):
            block += np.outer(wa[:, k], wb[k])
        c = alpha * block + (beta * c if k0 == 0 else c)
    return c


@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_the_amx_kernel_sums_in_its_documented_order(be, product):
    """The AMX kernel's code (tile instructions emulated after Intel's pseudocode) gives, bit
    for bit on 1, 2 and 3 threads, the float32 sums of :func:`_amx_order`: its packing, tiles
    and blocks add every term once, in order, at odd shapes and past one k block (alpha and
    beta powers of two, so no rounding depends on whether the compiler fuses the epilogue's
    multiply-adds)."""
    module = be.kernels.variant("gemm_bf16_amx_emulated")
    trans_a, trans_b = PRODUCTS[product]
    rng = np.random.default_rng(21)
    for m, n, k in [(37, 45, 29), (33, 17, 1031), (1, 70, 515)]:
        a, b = _operands(rng, m, n, k, trans_a, trans_b, pad=5)
        abits, bbits = be.to_bf16(a), be.to_bf16(b)
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        expected = _amx_order(abits, bbits, c0, 0.5, 0.25, trans_a, trans_b)
        for threads in (1, 2, 3):
            c = c0.copy()
            gemm_bf16(module, abits, bbits, c, 0.5, 0.25, trans_a, trans_b, threads)
            np.testing.assert_array_equal(c.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("kernel", ["native", "amx_emulated"])
def test_a_kept_area_holds_the_packing_buffers(be, kernel):
    """With an area (as the backend passes its shared one), the kernel packs into it instead
    of allocating buffers of its own: an area of ``nl_gemm_bf16_work_bytes`` is enough (it
    does not grow), it is written, and the result is the same bits."""
    from neonlite.backends.cpu.bf16_packed import SharedArea
    if kernel == "native":
        need("bf16")
        module, _ = gemm_module(be.kernels)
    else:
        module = be.kernels.variant("gemm_bf16_amx_emulated")
    rng = np.random.default_rng(4)
    a, b = _operands(rng, 70, 300, 600, False, True)
    abits, bbits = be.to_bf16(a), be.to_bf16(b)
    for threads in (1, 2, 3):
        fresh = np.zeros((70, 300), np.float32)
        gemm_bf16(module, abits, bbits, fresh, 1.0, 0.0, False, True, threads)
        area, kept = SharedArea(), np.zeros((70, 300), np.float32)
        area.ensure(module.ffi, -(-module.lib.nl_gemm_bf16_work_bytes(70, 300, threads) // 4))
        held = area.array
        held.view(np.uint32)[:] = 0xFFFFFFFF
        gemm_bf16(module, abits, bbits, kept, 1.0, 0.0, False, True, threads, area=area)
        assert area.array is held and (held.view(np.uint32) != 0xFFFFFFFF).any()
        np.testing.assert_array_equal(kept, fresh)


def test_a_work_area_off_a_cache_line_is_refused(be):
    """The micro-kernels read packed panels with aligned loads: a work area off a 64-byte
    boundary is refused (-4), not used (the emulated kernel would not fault on it)."""
    from neonlite.backends.cpu.tensor import aligned_empty
    module = be.kernels.variant("gemm_bf16_amx_emulated")
    ffi, lib = module.ffi, module.lib
    a, b = np.zeros((4, 5), np.uint16), np.zeros((5, 3), np.uint16)
    c = np.zeros((4, 3), np.float32)
    work = aligned_empty((lib.nl_gemm_bf16_work_bytes(4, 3, 1) // 4 + 16,), np.float32)
    args = (ffi.cast("uint16_t *", a.ctypes.data), ffi.cast("uint16_t *", b.ctypes.data),
            ffi.cast("float *", c.ctypes.data), ffi.NULL, 4, 3, 5, 5, 3, 3, 0, 0, 0, 1.0, 0.0, 1)
    assert lib.nl_gemm_bf16_to(*args, ffi.cast("void *", work.ctypes.data)) == 0
    assert lib.nl_gemm_bf16_to(*args, ffi.cast("void *", work.ctypes.data + 4)) == -4


def test_bad_operands_are_one_clear_error(be):
    a = np.zeros((4, 5), np.uint16)
    with pytest.raises(ValueError, match="A must be a 2-D uint16"):
        be.dot_bf16(a.astype(np.float32), a, np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match=r"op\(A\) is 4x5, op\(B\) 4x5"):
        be.dot_bf16(a, a, np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="rows that do not overlap"):
        be.dot_bf16(np.broadcast_to(a[0], (4, 5)), a.T.copy(), np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="unit-stride rows"):
        be.dot_bf16(a[:, ::2], a.T.copy()[::2], np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="path must be compute or storage"):
        be.dot_bf16(a, a.T.copy(), np.zeros((4, 4), np.float32), path="fast")


def test_the_amx_variant_compiles_here():
    """The AMX kernel is built on every machine with a compiler that knows AMX (gcc 11+,
    clang 12+); it runs only where AMX is granted (see the next test)."""
    import re
    from neonlite.kernels.build import default_builder
    from neonlite.kernels.specs import find
    from neonlite.kernels.toolchain import find_c_compiler
    module = default_builder().load_cpu(find("gemm_bf16_amx"))
    version = find_c_compiler().version
    major = re.search(r"(\d+)\.\d+\.\d+", version)
    knows_amx = major is not None and int(major.group(1)) >= (12 if "clang" in version else 11)
    assert module.lib.nl_gemm_bf16_built() == (1 if knows_amx else 0), version


@requires("amx")
def test_amx_variant_is_chosen_and_within_the_bound(be):
    from neonlite.backends.cpu.bf16_kernels import gemm_variant
    assert gemm_variant()[0] == "gemm_bf16_amx"
    test_products_within_the_bf16_bound(be, lambda path: path, "compute", "forward", 97, 65,
                                        515)


FORCED_OFF = r"""
import json, numpy as np, neonlite
be = neonlite.gen_backend("cpu", batch_size=4)
a = be.to_bf16(np.ones((5, 7), np.float32)); b = be.to_bf16(np.ones((7, 3), np.float32))
c = np.zeros((5, 3), np.float32)
be.dot_bf16(a, b, c)
try:
    be.dot_bf16(a, b, c, path="compute")
    refused = None
except ValueError as err:
    refused = str(err)
choice = be.bf16_choice()
import sys
loaded = sorted(name for name in sys.modules if name.startswith("_nlk_"))
print(json.dumps({"paths": choice.paths, "reason": choice.reasons["gemm"], "c": c.tolist(),
                  "refused": refused, "loaded": loaded}))
"""


def _child(code, **env):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, **env), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_forced_off_runs_the_storage_path_and_loads_no_bf16_instructions():
    found = _child(FORCED_OFF, NEONLITE_CPU_FEATURES_OFF="avx512_bf16,amx_tile,amx_bf16")
    assert found["paths"] == {c: "storage" for c in bf16_choice.OP_CLASSES}
    assert "turned off" in found["reason"]
    assert found["c"] == [[7.0] * 3] * 5
    assert "cannot run here" in found["refused"]
    # every kernel module the process imported (the builder names them _nlk_<variant>_<key>)
    assert any(name.startswith("_nlk_bf16_cast_") for name in found["loaded"]), found
    assert not [name for name in found["loaded"] if name.startswith("_nlk_gemm_bf16")], found


@pytest.mark.parametrize("value,paths", [("off", "off"), ("storage", "storage")])
def test_neonlite_bf16_overrides_the_measurement(value, paths):
    found = _child(FORCED_OFF.replace('be.dot_bf16(a, b, c)\n', ''), NEONLITE_BF16=value)
    assert set(found["paths"].values()) == {paths}
    assert "NEONLITE_BF16" in found["reason"]


@pytest.mark.parametrize("gemm,conv,paths", [
    ((300.0, 100.0), (300.0, 100.0), ("compute", "compute")),
    ((300.0, 100.0), (90.0, 100.0), ("compute", "storage")),
    ((100.0, 100.0), (300.0, 100.0), ("storage", "compute")),
    ((300.0, 100.0), None, ("compute", "compute"))])
def test_convolutions_take_the_path_their_own_measurement_chose(be, monkeypatch, gemm, conv,
                                                                  paths):
    """Where a bf16 GEMM runs (here the emulated AMX kernel stands in for one), ``gemm`` and
    ``conv`` each take the path of their own measurement (``conv`` the GEMM's where its own
    could not run); attention, not measured, stays on storage; ``NEONLITE_BF16=compute`` puts
    all three on compute."""
    emulated = be.kernels.variant("gemm_bf16_amx_emulated")
    monkeypatch.setattr(bf16_choice, "gemm_module", lambda modules: (emulated, "emulated"))
    monkeypatch.setattr(bf16_choice, "gemm_variant", lambda: ("gemm_bf16_amx", "emulated"))
    monkeypatch.setattr(bf16_choice, "_cached", lambda modules, variant: ("key", None))
    monkeypatch.setattr(bf16_choice, "_keep", lambda *args: None)
    monkeypatch.setattr(bf16_choice, "measure_gemm", lambda modules, module: gemm)
    monkeypatch.setattr(bf16_choice, "measure_conv", lambda modules, module: conv)
    choice = bf16_choice._choose(be.kernels, None)
    assert choice.paths == {"attention": "storage", "gemm": paths[0], "conv": paths[1]}
    assert choice.conv_gflops == conv
    assert ("as gemm's measurement chose" in choice.reasons["conv"]) == (conv is None)
    assert choice.reasons["attention"].startswith("not measured")
    forced = bf16_choice._choose(be.kernels, "compute")
    assert forced.paths == {"attention": "compute", "conv": "compute", "gemm": "compute"}
    assert "tiles' products on the bf16 GEMM" in forced.reasons["conv"]
    assert "products on the bf16 GEMM" in forced.reasons["attention"]


def test_the_convolution_measurement_times_both_paths_on_one_core(be):
    """``measure_conv`` on the emulated AMX kernel: two positive rates (the emulation, plain C,
    far below the storage path's float32 kernels), and the thread count restored."""
    from neonlite.backends.cpu.threads import openmp_threads
    threads = openmp_threads()
    emulated = be.kernels.variant("gemm_bf16_amx_emulated")
    rates = bf16_choice.measure_conv(be.kernels, emulated, shape=(2, 16, 8, 8, 32, 3, 3),
                                     bursts=2)
    assert rates is not None and rates[0] > 0 and rates[1] > rates[0]
    assert openmp_threads() == threads


def test_neonlite_bf16_compute_where_there_is_no_kernel_falls_back_and_says_so():
    found = _child(FORCED_OFF, NEONLITE_BF16="compute",
                   NEONLITE_CPU_FEATURES_OFF="avx512_bf16,amx_bf16")
    assert found["paths"]["gemm"] == "storage"
    assert "NEONLITE_BF16=compute cannot be met" in found["reason"]


def test_a_bad_neonlite_bf16_is_one_clear_error(monkeypatch, be):
    monkeypatch.setenv("NEONLITE_BF16", "fast")
    with pytest.raises(ValueError, match="NEONLITE_BF16='fast': expected one of compute, "
                                         "storage, off"):
        be.bf16_path()


def test_the_measurement_is_kept_in_the_kernel_cache(tmp_path, monkeypatch):
    need("bf16")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    from neonlite.backends.cpu.build import KernelModules
    from neonlite.kernels.build import Builder
    first = bf16_choice.choose(KernelModules(builder=Builder(cache)))
    assert first.source == "measured" and first.bf16_gflops > 0 and first.f32_gflops > 0
    assert first.paths["gemm"] in ("compute", "storage")
    assert first.paths["conv"] == first.paths["attention"] == "storage"
    assert [p.name.split("-")[0] for p in cache.iterdir()].count("bf16_choice") == 1
    again = bf16_choice.choose(KernelModules(builder=Builder(cache)))
    assert again.source == "cached" and again.paths == first.paths
    assert (again.bf16_gflops, again.f32_gflops) == (first.bf16_gflops, first.f32_gflops)
    from neonlite.kernels.cache import DiskCache
    DiskCache(cache).clean()  # what `neonlite kernels clean` does: the next use measures again
    assert not [p for p in cache.iterdir() if p.name.startswith("bf16_choice")]
    assert bf16_choice.choose(KernelModules(builder=Builder(cache))).source == "measured"


def test_op_classes_come_from_the_op_table():
    from neonlite.backends.ops import OPS
    assert bf16_choice.OP_CLASSES == ("attention", "conv", "gemm")
    assert OPS["compound_dot"].bf16_class == "gemm"
    assert cpu_features.FEATURES_OFF == "NEONLITE_CPU_FEATURES_OFF"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,n,k", [(37, 45, 29), (97, 65, 515), (13, 1, 3)])
def test_bits_out_are_the_float32_result_rounded(be, on_path, path, m, n, k):
    """``dot_bf16(..., bits=out)``: out holds C rounded to nearest even, bit for bit as the
    cast of the float32 C (the compute path writes it in the GEMM's epilogue, after each
    block's last k block; the storage path in one pass after the GEMM)."""
    path = on_path(path)
    rng = np.random.default_rng(12)
    for trans_a, trans_b in PRODUCTS.values():
        a, b = _operands(rng, m, n, k, trans_a, trans_b)
        c = rng.standard_normal((m, n)).astype(np.float32)
        bits = np.full((m, n), 0xFFFF, np.uint16)
        be.dot_bf16(be.to_bf16(a), be.to_bf16(b), c, 0.75, 0.5, trans_a, trans_b, path=path,
                    bits=bits)
        np.testing.assert_array_equal(bits, f32_to_bf16(c))
    with pytest.raises(ValueError, match="bits must be a bf16"):
        be.dot_bf16(be.to_bf16(a), be.to_bf16(b), c, transA=trans_a, transB=trans_b,
                    path=path, bits=bits[:, :-1])
