"""Every backend op that hands raw pointers to compiled code (C through cffi on the CPU, CUDA
kernels on the GPU), called once with a correct set of operands and then with each operand in
turn spoiled (``support.operand_cases``): one element fewer or more, float64, float16 or int32
data into a float32 backend, a non-contiguous view.  A misshaped or mistyped operand is one
ValueError / TypeError naming the op, the operand and its shape or dtype, raised before
anything is written (the CPU kernels used to write past the buffers, and glibc aborted
Python); a strided view either gives the correct call's results or one such error.  On the CPU
backend and on the GPU backend's own code over the host emulator (compiled and emulated, not
run on a GPU)."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.operand_cases import cases, spoiled
from support.requires import need, requires

import neonlite

CASES = cases()
IDS = [c.op + "".join(f"[{t}]" for t in c.tags) for c in CASES]


def _values(ops):
    return {n: t.get().copy() for n, t in ops.items() if t is not None}


def _fresh(be, case):
    return case.build(be, np.random.default_rng(0))


def _expect_clear(case, name, kind, bad, error):
    """The error names the op and the spoiled operand with its shape or dtype."""
    message = str(error)
    if case.optree:  # an assignment: the op-tree's shapes, as the GPU code generator says them
        assert isinstance(error, ValueError), message
        assert message.startswith("op-tree ") and str(tuple(bad.shape)) in message, message
        return
    if kind == "fewer" and name in case.index_checked and isinstance(error, IndexError):
        assert message.startswith("id ") and "expected a whole number in [0, " in message, \
            message
        return
    assert isinstance(error, (ValueError, TypeError)), f"{type(error).__name__}: {message}"
    assert message.startswith(case.op + ":") or message.startswith(case.op + " ("), message
    if kind in ("fewer", "more"):
        assert isinstance(error, ValueError), message
        assert str(tuple(bad.shape)) in message, message
    elif kind in ("float64", "float16", "int32"):
        assert isinstance(error, TypeError), message
        assert kind in message, message
    first = next(iter(_fresh_names(case)))
    assert name in message or name == first, message


def _fresh_names(case):
    return case.build(neonlite.get_backend(), np.random.default_rng(0)).keys()


def _check_case(be, case):
    ops = _fresh(be, case)
    case.call(be, ops)
    want = _values(ops)
    for name, t in _fresh(be, case).items():
        for kind, bad in spoiled(be, name, t, case):
            ops = _fresh(be, case)
            ops[name] = bad
            before = _values(ops)
            try:
                case.call(be, ops)
            except Exception as error:  # noqa: BLE001 - what it is, is the check
                _expect_clear(case, name, kind, bad, error)
                if isinstance(error, IndexError):
                    continue  # the GPU finds a bad id on the device, after its (safe) launch
                after = _values(ops)
                for n, value in before.items():
                    assert np.array_equal(after[n], value, equal_nan=True), \
                        f"{case.op} wrote into {n} before refusing the {kind} {name}"
                continue
            assert kind == "strided", f"{case.op} took a {kind} {name} of shape " \
                                      f"{tuple(bad.shape)}, dtype {bad.dtype}"
            for n, value in _values(ops).items():
                np.testing.assert_allclose(value, want[n], rtol=1e-5, atol=1e-5,
                                           err_msg=f"{case.op} with a strided {name}: {n}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cpu_refuses_spoiled_operands(case):
    _check_case(neonlite.gen_backend("cpu", batch_size=4, rng_seed=0), case)


@requires("emulator")
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gpu_backend_refuses_spoiled_operands(monkeypatch, case):
    _check_case(host_gpu_backend(monkeypatch), case)


def _check_example_rows(be):
    """``example_dropout_mask`` reads its mask as ``examples`` rows: a count that does not
    divide the mask is one ValueError naming the op (the CPU said numpy's reshape error; the
    GPU kernel filled part of the mask)."""
    mask = be.zeros((4, 5))
    with pytest.raises(ValueError, match=r"^example_dropout_mask: mask has shape \(4, 5\) "
                                         r"\(20 elements\); expected whole rows for 3 examples"):
        be.example_dropout_mask(mask, 0.5, 1, 0, 0, 0, examples=3)
    assert not np.any(mask.get())
    be.example_dropout_mask(mask, 0.5, 1, 0, 0, 0, examples=2)
    assert set(np.unique(mask.get())) <= {0.0, 2.0} and mask.get().any()


def test_cpu_example_dropout_mask_needs_whole_rows():
    _check_example_rows(neonlite.gen_backend("cpu", batch_size=4, rng_seed=0))


@requires("emulator")
def test_gpu_example_dropout_mask_needs_whole_rows(monkeypatch):
    _check_example_rows(host_gpu_backend(monkeypatch))


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_batchnorm_moments_takes_rows(monkeypatch, name):
    """x (M, C) only: the CPU kernel read a 3-D x's first two axes as M and C (it failed on
    an unrelated TypeError before the call)."""
    if name == "gpu":
        need("emulator")
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0) if name == "cpu" else \
        host_gpu_backend(monkeypatch)
    x = be.array(np.ones((2, 16, 3), np.float32))
    with pytest.raises(ValueError, match=r"^batchnorm_moments: x has shape \(2, 16, 3\); "
                                         r"expected 2 axes"):
        be.batchnorm_moments(x)
    mean, m2 = be.batchnorm_moments(x.reshape(32, 3))
    np.testing.assert_allclose(mean, np.ones(3))
    np.testing.assert_allclose(m2, np.zeros(3), atol=1e-6)


def _backend(monkeypatch, name, dtype=np.float32):
    if name == "cpu":
        return neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=dtype)
    need("emulator")
    return host_gpu_backend(monkeypatch, dtype=dtype)


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_an_expression_operand_is_a_type_error_naming_it(monkeypatch, name):
    """A table op given ``x * 30.0`` (an op tree) where it takes a tensor: one TypeError
    saying which operand and what to do (the CPU raised AttributeError '_ary', the GPU
    'shape'; found on the first H200 run)."""
    be = _backend(monkeypatch, name)
    x, out = be.array(np.ones((5, 7), np.float32)), be.zeros((5, 7))
    with pytest.raises(TypeError, match=r"^softmax: x is the expression mul\(\.\.\.\), not a "
                                        r"tensor; evaluate it into one first"):
        be.softmax(x * 30.0, out)


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_bf16_one_hot_targets_are_not_class_indices(monkeypatch, name):
    """bfloat16 one-hot targets are uint16 bits: the GPU read them as integer class indices
    and refused (64, 1000) targets for 64 rows (the first H200 run: softmax_ce_bf16 and the
    ResNet-20 bf16 benchmark rows)."""
    if name == "cpu":
        pytest.importorskip("neonlite.backends.cpu.bf16")
    be = _backend(monkeypatch, name, dtype="bf16" if name == "gpu" else np.float32)
    if name == "cpu":
        from neonlite.backends.shared.bfloat16 import BFLOAT16
        make = lambda a: be.array(a, dtype=BFLOAT16)  # noqa: E731
    else:
        make = be.array
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 10)).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 6)]
    probs, grad = make(np.zeros((6, 10), np.float32)), make(np.zeros((6, 10), np.float32))
    loss = be.softmax_cross_entropy(make(logits), make(onehot), probs, grad, 1.0 / 6)
    shifted = logits - logits.max(1, keepdims=True)
    want = -(onehot * (shifted - np.log(np.exp(shifted).sum(1, keepdims=True)))).sum()
    assert abs(loss - want) < 3e-2 * max(1.0, abs(want))


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_a_bad_row_id_is_named_as_the_number_it_is(monkeypatch, name):
    """ids held as float32 tensors: the GPU named id 11 as ``np.float32(11.0)`` (the first
    H200 run); both backends now give the reference's message."""
    be = _backend(monkeypatch, name)
    table = be.array(np.ones((11, 6), np.float32))
    with pytest.raises(IndexError, match=r"^id 11 at position \(0, 1\) of ids \(1, 2\) is out "
                                         r"of range: expected a whole number in \[0, 11\)$"):
        be.take_rows(table, be.array(np.array([[1, 11]], np.int32)), be.zeros((1, 2, 6)))
