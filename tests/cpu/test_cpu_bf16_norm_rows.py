"""Layer norm and RMSNorm on bfloat16 rows: the C functions that take every operand as bf16
bits (``layernorm_fprop_bf16`` ... in ``kernels/cpu/norm.c`` and ``rmsnorm.c``, the rows'
``bf16_symbol``): the rows, and the per-feature and per-row operands (gamma, beta, the saved
statistics, the parameter gradients).

The bound.  Every input is a bf16 value, which the float64 reference (``backends/reference/
norm.py``) reads exactly.  The kernels compute in float32 with double sums, so before rounding
a result v is within the float32 harness's tolerance of the reference, |v - want| <= t |want|
+ t (t = 2e-5, ``test_op_table.py``'s, for these unit-scale normal inputs); a bf16 output is v
rounded to nearest even, |bf16(v) - v| <= 2^-8 |v| (8 significant bits), so

    |got - want| <= (2^-8 + t + 2^-8 t) |want| + (1 + 2^-8) t,

and the tests use rtol = 2^-8 + 1.01 t, atol = 1.01 t (float32 outputs: rtol = atol = 1.01 t).
"""
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.threads import openmp_threads, set_cpu_threads
from neonlite.backends.ops import OPS
from neonlite.backends.reference import norm as reference
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16

pytestmark = [requires("compiler"), pytest.mark.usefixtures("keep_backend")]

U_BF16, T = 2.0 ** -8, 2e-5
#: (M, D): a row past one 256-column chunk (widened once, whole), a row past the 2048 columns
#: staged whole (widened a chunk at a time at each pass), a few short rows; none a multiple of
#: 16 or 32, and the first two big enough for the kernels' OpenMP loops
SHAPES = [(97, 517), (23, 2053), (5, 3)]
ROWS = ("layernorm_fprop", "layernorm_bprop", "rmsnorm_fprop", "rmsnorm_bprop")


def _backend():
    return neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype="bf16")


def _arrays(name, M, D, joined, seed=3):
    """{operand: float32 array of bf16 values} of row ``name`` (None: left out); ``joined``:
    with the residual operands."""
    rng = np.random.default_rng(seed)
    op = OPS[name]
    arrays = {}
    for o in op.operands:
        shape = tuple({"M": M, "D": D}.get(d, d) for d in o.shape)
        if o.trailing and not joined:
            arrays[o.name] = None
            continue
        values = rng.normal(size=shape)
        if o.positive:
            values = np.abs(values) + 0.5
        arrays[o.name] = bf16_to_f32(f32_to_bf16(values.astype(np.float32)))
    return arrays


def _tensors(be, arrays, float32=()):
    """Backend tensors of ``arrays``: bf16, but float32 for the names in ``float32``."""
    return {n: None if a is None else
            be.array(a, dtype=np.float32) if n in float32 else be.array(a)
            for n, a in arrays.items()}


def _fused_calls(monkeypatch):
    """The results of the calls of ``KernelModules.run_bf16_op`` made from now on."""
    calls, original = [], KernelModules.run_bf16_op

    def counted(self, *args, **kwargs):
        calls.append(original(self, *args, **kwargs))
        return calls[-1]
    monkeypatch.setattr(KernelModules, "run_bf16_op", counted)
    return calls


def _call(be, name, tensors):
    getattr(be, name)(**tensors)
    return {n: None if t is None else t.get() for n, t in tensors.items()}


@pytest.mark.parametrize("joined", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{d}" for m, d in SHAPES])
@pytest.mark.parametrize("name", ROWS)
def test_bf16_norm_rows_match_the_float64_reference(monkeypatch, name, shape, joined):
    """The fused kernel runs (no widening of the rows) and every written operand is within
    the bound of the module docstring of the float64 reference on the same bf16 inputs."""
    be = _backend()
    calls = _fused_calls(monkeypatch)
    arrays = _arrays(name, *shape, joined)
    got = _call(be, name, _tensors(be, arrays))
    assert calls == [True], "the bf16 kernel took the call"
    want = {n: None if a is None else a.astype(np.float64) for n, a in arrays.items()}
    eps = {"eps": 1e-5} if name.endswith("fprop") else {}
    getattr(reference, name)(**want, **eps)
    for o in OPS[name].operands:
        if o.written and got[o.name] is not None:
            np.testing.assert_allclose(got[o.name], want[o.name], rtol=U_BF16 + 1.01 * T,
                                       atol=1.01 * T, err_msg=f"{name}: {o.name}")


@pytest.mark.parametrize("name", ROWS)
def test_bf16_norm_rows_are_bit_identical_on_1_2_and_3_threads(name):
    be = _backend()
    threads = openmp_threads()
    results = []
    try:
        for n in (1, 2, 3):
            set_cpu_threads(n)
            for shape in SHAPES[:2]:
                tensors = _tensors(be, _arrays(name, *shape, joined=True))
                getattr(be, name)(**tensors)
                results.append([t._ary.copy() for t in tensors.values() if t is not None])
    finally:
        set_cpu_threads(threads)
    per_run = len(results) // 3
    for run in (results[per_run:2 * per_run], results[2 * per_run:]):
        for a, b in zip([x for r in results[:per_run] for x in r], [x for r in run for x in r]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ROWS)
def test_no_operand_passes_through_a_float32_work_tensor(monkeypatch, name):
    """The fused call widens nothing (the boundary makes no work tensor, not even for the
    vectors); float32 ones among bf16 rows are refused by the row's check, as before."""
    M, D = SHAPES[0]
    arrays = _arrays(name, M, D, joined=True)
    be = _backend()
    calls = _fused_calls(monkeypatch)
    _call(be, name, _tensors(be, arrays))
    assert calls == [True], "the bf16 kernel took the call"
    assert not be.bf16_boundary._work, f"widened: {sorted(be.bf16_boundary._work)}"
    vector = "gamma"
    with pytest.raises(TypeError, match="dtype float32; expected bfloat16"):
        _call(be, name, _tensors(be, arrays, float32=(vector,)))


def test_rmsnorm_total_may_be_x():
    """RMSNorm's residual add written into x itself (total is x): the same as into a tensor
    of its own."""
    be = _backend()
    arrays = _arrays("rmsnorm_fprop", *SHAPES[1], joined=True)
    apart = _call(be, "rmsnorm_fprop", _tensors(be, arrays))
    tensors = _tensors(be, arrays)
    tensors["total"] = tensors["x"]
    inplace = _call(be, "rmsnorm_fprop", tensors)
    for n in ("y", "xhat", "rstd", "total"):
        np.testing.assert_array_equal(inplace[n], apart[n], err_msg=n)


def test_a_kept_bf16_row_call_runs_on_its_own_arrays_only(monkeypatch):
    """The second call of a row on the same bf16 tensors runs the call kept from the first
    (no check, no new pointers); other tensors are checked and prepared again, and a wrong
    operand is still refused by the row's check."""
    be = _backend()
    x, gamma, beta, y, xhat = (be.array(np.random.default_rng(i).normal(size=s).astype(
        np.float32)) for i, s in enumerate(((40, 24), (1, 24), (1, 24), (40, 24), (40, 24))))
    invstd = be.empty((40, 1))
    checks = []
    original = be.bf16_boundary.checked
    monkeypatch.setattr(be.bf16_boundary, "checked",
                        lambda *args: checks.append(1) or original(*args))
    be.layernorm_fprop(x, gamma, beta, y, xhat, invstd, 1e-5)
    first = y.get().copy()
    be.layernorm_fprop(x, gamma, beta, y, xhat, invstd, 1e-5)
    assert checks == [1]
    np.testing.assert_array_equal(y.get(), first)
    other = be.empty((40, 24))
    be.layernorm_fprop(x, gamma, beta, other, xhat, invstd, 1e-5)
    assert checks == [1, 1]
    np.testing.assert_array_equal(other.get(), first)
    with pytest.raises(ValueError, match="layernorm_fprop"):
        be.layernorm_fprop(x, be.empty((1, 23)), beta, y, xhat, invstd, 1e-5)
