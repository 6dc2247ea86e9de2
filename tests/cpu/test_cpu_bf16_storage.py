"""bfloat16 tensors on the CPU backend (``gen_backend("cpu", datatype="bf16")``): what they
hold, when they are refused, the products of Linear layers on them through ``dot_bf16``
(bit-identical on 1, 2 and 3 threads, on both paths), and the storage path on a CPU without
AVX512-BF16 (simulated), where no module holding bf16 instructions may be loaded.  The per-op
results against the references are ``tests/backend/test_op_table_bf16.py``."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support.requires import need, requires

import neonlite
from neonlite.backends.cpu import bf16_choice
from neonlite.backends.shared.bfloat16 import BFLOAT16, bf16_to_f32, f32_to_bf16
from neonlite.kernels.cpu_features import FEATURES_OFF

pytestmark = requires("compiler")

#: op(A) (m, k) @ op(B) (k, n): none a multiple of the micro-tile, of 16 or of 32; k past one
#: k block of the bf16 kernel
SHAPES = [(37, 45, 29), (97, 65, 515)]
#: forward X @ W, input gradient dY @ W^T, weight gradient X^T @ dY
PRODUCTS = {"forward": (False, False), "input_grad": (False, True), "weight_grad": (True, False)}
NO_BF16_INSTRUCTIONS = "avx512_bf16,amx_tile,amx_bf16"


@pytest.fixture(autouse=True)
def keep_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def test_bf16_tensors_hold_bits_and_give_float32_values():
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    values = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    t = be.array(values)
    assert t.dtype == BFLOAT16 and t.storage == "bf16" and t.host_dtype == np.float32
    assert t.get().dtype == np.float32
    np.testing.assert_array_equal(np.asarray(t), bf16_to_f32(f32_to_bf16(values)))
    assert be.empty((2, 2), dtype=np.float32).storage is None
    assert not be.is_finite(be.array(np.array([1.0, np.inf])))
    assert not be.is_finite(be.array(np.array([np.nan, 0.0])))
    assert be.is_finite(t)


def test_bf16_off_is_refused_with_how_to_turn_it_on(monkeypatch):
    monkeypatch.setenv(bf16_choice.ENV, "off")
    with pytest.raises(ValueError, match=r"^the cpu backend's bfloat16 is off \(NEONLITE_BF16="
                                         r"off\); unset NEONLITE_BF16 .* or set it to storage "
                                         r"or compute"):
        neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    be = neonlite.gen_backend("cpu", batch_size=2)
    with pytest.raises(ValueError, match="NEONLITE_BF16=off"):
        be.empty((2, 3), dtype="bf16")
    with pytest.raises(ValueError, match="stores float16, float32, float64 or bfloat16"):
        neonlite.gen_backend("cpu", batch_size=2, datatype=np.uint16)


def _products(be, m, n, k, trans_a, trans_b, beta):
    """C (bf16) = op(A) @ op(B) + beta * C on bf16 tensors, on 1, 2 and 3 threads: the
    results' bits."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.normal(size=(n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.normal(size=(m, n)).astype(np.float32)
    A, B = be.array(a), be.array(b)
    found = []
    for threads in (1, 2, 3):
        be.set_threads(threads)
        C = be.array(c0)
        be.compound_dot(A, B, C, beta=beta, transA=trans_a, transB=trans_b)
        found.append(C._ary.copy())
    want = (A.get().T if trans_a else A.get()).astype(np.float64) @ \
        (B.get().T if trans_b else B.get()) + beta * be.array(c0).get()
    return found, want


@pytest.mark.parametrize("product", sorted(PRODUCTS))
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_compute_path_products_are_bit_identical_on_1_2_3_threads(monkeypatch, product, m, n,
                                                                   k):
    need("bf16")
    monkeypatch.setenv(bf16_choice.ENV, "compute")
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    assert be.bf16_path("gemm") == "compute"
    found, want = _products(be, m, n, k, *PRODUCTS[product], 0.5)
    assert found[0].dtype == BFLOAT16
    assert np.array_equal(found[0], found[1]) and np.array_equal(found[0], found[2])
    got = bf16_to_f32(found[0])
    assert np.abs(got - want).max() <= 2.0 ** -8 * np.abs(want).max() + 1e-3 * np.sqrt(k)


STORAGE_THREADS = r"""
import json, sys
import numpy as np
import neonlite
shapes, products = json.loads(sys.argv[1]), json.loads(sys.argv[2])
be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
rng = np.random.default_rng(3)
same = []
for m, n, k in shapes:
    for trans_a, trans_b in products:
        A = be.array(rng.normal(size=(k, m) if trans_a else (m, k)))
        B = be.array(rng.normal(size=(n, k) if trans_b else (k, n)))
        c0 = rng.normal(size=(m, n))
        found = []
        for threads in (1, 2, 3):
            be.set_threads(threads)
            C = be.array(c0)
            be.compound_dot(A, B, C, beta=0.5, transA=trans_a, transB=trans_b)
            found.append(C.get())
        same.append(all(np.array_equal(found[0], f) for f in found[1:]))
print(json.dumps({"path": be.bf16_path("gemm"), "same": same}))
"""


def _child(code, *args, **env):
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, **env), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_storage_path_products_are_bit_identical_on_1_2_3_threads():
    """The storage path widens exactly and runs the float32 GEMM, whose sums are the same
    on any thread count in the deterministic mode (``NEONLITE_DETERMINISTIC=1``)."""
    found = _child(STORAGE_THREADS, json.dumps(SHAPES), json.dumps(list(PRODUCTS.values())),
                   NEONLITE_BF16="storage", NEONLITE_DETERMINISTIC="1")
    assert found["path"] == "storage" and all(found["same"]), found


LINEAR_STEP = r"""
import json, sys
import numpy as np
import neonlite
be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
rng = np.random.default_rng(0)
x, w = be.array(rng.normal(size=(37, 29))), be.array(rng.normal(size=(29, 45)) * 0.2)
y, h, dy = be.empty((37, 45)), be.empty((37, 45)), be.array(rng.normal(size=(37, 45)))
dx, dw, dpre = be.empty((37, 29)), be.empty((29, 45)), be.empty((37, 45))
be.compound_dot(x, w, y)
be.gelu(y, h, pre=y)
be.gelu_bprop(y, dy, dpre)
be.compound_dot(dpre, w, dx, transB=True)
be.compound_dot(x, dpre, dw, transA=True)
f32 = neonlite.gen_backend("cpu", batch_size=2)
X, W, DPRE = (f32.array(t.get()) for t in (x, w, dpre))
DX, DW = f32.empty((37, 29)), f32.empty((29, 45))
f32.compound_dot(DPRE, W, DX, transB=True)
f32.compound_dot(X, DPRE, DW, transA=True)
loaded = sorted(name for name in sys.modules if name.startswith("_nlk_"))
print(json.dumps({"paths": be.bf16_choice().paths, "loaded": loaded,
                  "dx": float(np.abs(dx.get() - DX.get()).max() / np.abs(DX.get()).max()),
                  "dw": float(np.abs(dw.get() - DW.get()).max() / np.abs(DW.get()).max())}))
"""


def test_without_avx512_bf16_a_linear_step_runs_the_storage_path_and_loads_no_bf16_code():
    """With the CPU's bf16 flags turned off (``NEONLITE_CPU_FEATURES_OFF``), a Linear + GELU
    step on bf16 tensors runs (products widened, float32 GEMM), its gradients within bf16's
    rounding of the float32 ones on the same values, and no module holding bf16 instructions
    is loaded (the casts are plain C)."""
    found = _child(LINEAR_STEP, **{FEATURES_OFF: NO_BF16_INSTRUCTIONS})
    assert found["paths"] == {c: "storage" for c in bf16_choice.OP_CLASSES}
    assert not [name for name in found["loaded"] if name.startswith("_nlk_gemm_bf16")], found
    assert any(name.startswith("_nlk_bf16_cast_") for name in found["loaded"]), found
    assert found["dx"] <= 2.0 ** -7 and found["dw"] <= 2.0 ** -7, found


def test_bf16_ids_are_refused_where_the_table_is_longer_than_bf16_counts_exactly():
    """bf16 holds whole numbers exactly up to 256: ids stored in bf16 look up a table of at
    most 257 rows (a character vocabulary); a longer one is one TypeError, not rows taken by
    rounded ids.  A bf16 tensor cannot index a tensor either."""
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    ids = be.array(np.array([[3, 256], [0, 1]]))
    small, out = be.array(np.arange(257 * 4).reshape(257, 4) * 0.01), be.empty((2, 2, 4))
    be.take_rows(small, ids, out)
    np.testing.assert_array_equal(out.get(), small.get()[[[3, 256], [0, 1]]])
    big = be.zeros((300, 4))
    for call in (lambda: be.take_rows(big, ids, out), lambda: be.scatter_add_rows(big, ids, out)):
        with pytest.raises(TypeError, match=r"ids are bfloat16, which holds whole numbers "
                                            r"exactly only up to 256, and (table|grad_table) "
                                            r"has 300 rows: store the ids as int32"):
            call()
    assert not big.get().any()
    with pytest.raises(TypeError, match="cannot index a tensor"):
        big[ids]


def test_is_finite_of_bf16_allocates_nothing_after_the_first_call():
    """``is_finite`` of a bf16 tensor (the loss-scale check of mixed precision) widens it in
    chunks into a kept buffer: a large tensor is checked without a temporary of its size."""
    from support.checks import allocation_peaks
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    values = np.random.default_rng(1).normal(size=(600, 500)).astype(np.float32)
    t = be.array(values)
    assert be.is_finite(t)
    assert max(allocation_peaks(lambda: be.is_finite(t) or True)) < 8 << 10
    values[599, 499] = np.inf
    t.set(values)
    assert not be.is_finite(t) and not be.is_finite(t[1::2, 1::3].T) and be.is_finite(t[:-1])


def test_products_refuse_mixed_element_types_as_the_gpu_does():
    """The products' row check runs on the operands as given, before any widening: a bf16 A
    with a float32 B is one TypeError naming B, as on the GPU backend."""
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    a, b, c = be.ones((3, 4)), be.ones((4, 5), dtype=np.float32), be.zeros((3, 5))
    with pytest.raises(TypeError, match="compound_dot: B has dtype float32; expected bfloat16"):
        be.compound_dot(a, b, c)
    assert not c.get().any()


def test_bf16_convolutions_and_pooling_plan_the_float32_kernels():
    """A bf16 backend's convolution and pooling plans choose the float32 C kernels: their
    modules hold the passes on bf16 bits (``tests/cpu/test_cpu_bf16_conv_pool.py``), and the
    boundary hands the other passes float32 work tensors (a plan made for the storage type
    chose none, and numpy ran every pass: LeNet's step 6x float32's)."""
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    assert be.compute_dtype == np.float32
    conv = be.conv_layer(4, 3, 12, 12, 8, 3, 3, pad=(1, 1))
    pool = be.pool_layer("max", 4, 8, 12, 12, 2, 2)
    assert conv.dtype == np.float32 and conv.conv is not None
    assert pool.dtype == np.float32 and pool.pool is not None


@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, -1.5, 1.00390625, 1.01171875, 3.3895314e38,
                                   1e-40, -1e-40, float("inf"), -float("inf"), float("nan"),
                                   np.float32(2.5), np.float64(0.1), 7])
def test_a_scalar_assigned_to_a_bf16_tensor_rounds_as_arrays_do(value):
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    t = be.empty((3, 5))
    t[:] = value
    want = f32_to_bf16(np.full((3, 5), value, np.float32))
    np.testing.assert_array_equal(t._ary, want)


def test_the_profiler_names_the_kernel_a_bf16_product_runs(monkeypatch):
    """``neonlite profile``'s variant column for a product of bf16 tensors: the storage path's
    kernel (MKL's packed GEMM where MKL is the float32 GEMM, else the fused storage GEMM where
    the CPU runs it), not the float32 GEMM's class; float32 products keep the class."""
    from neonlite.backends.cpu.bf16_kernels import storage_module
    monkeypatch.setenv(bf16_choice.ENV, "storage")
    be = neonlite.gen_backend("cpu", batch_size=2, datatype="bf16")
    gemm = type(be.kernels.gemm).__name__
    variant = be.kernel_variant("compound_dot", (be.empty((5, 3)), be.empty((3, 4)),
                                                 be.empty((5, 4))))
    if gemm == "MKLGemm":
        assert variant == "gemm_packed"
    elif storage_module(be.kernels)[0] is not None:
        assert variant == "gemm_storage"
    else:
        assert variant == gemm
    f32 = neonlite.gen_backend("cpu", batch_size=2)
    assert f32.kernel_variant("compound_dot", (f32.empty((5, 3)), f32.empty((3, 4)),
                                               f32.empty((5, 4)))) == gemm
