"""Softmax and the fused softmax-cross-entropy on bfloat16 tensors by the C functions that take
bf16 bits (``softmax_rows_bf16``, ``softmax_cross_entropy*_bf16`` in ``kernels/cpu/softmax.c``).

What they promise is exact: the probabilities and gradients are those of widening the
operands, running the float32 kernels and narrowing (to nearest even), bit for bit, so the
tests compare against the float32 backend on the widened values; the loss, a float64 sum, is
the float32 kernel's to double rounding (its rows summed in fixed blocks, so the same bits on
1, 2 and 3 threads).  The float32 kernels' own bound against the float64 reference is
``tests/backend/test_op_table.py``'s; bf16 adds one rounding, 2^-8 relative
(``tests/backend/test_op_table_bf16.py``)."""
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.cpu import softmax
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.threads import openmp_threads, set_cpu_threads
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16

pytestmark = [requires("compiler"), pytest.mark.usefixtures("keep_backend")]

#: (M, K): classes within one staged row, past it (widened a chunk at a time), a few
SHAPES = [(67, 517), (19, 2053), (5, 3)]


def _backends():
    return (neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype="float32"),
            neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype="bf16"))


def _logits(M, K, seed=4):
    values = np.random.default_rng(seed).normal(size=(M, K)) * 4.0
    return bf16_to_f32(f32_to_bf16(values.astype(np.float32)))


def _targets(M, K, kind, seed=5):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, K, size=M)
    if kind == "index":
        return idx.astype(np.int32)
    one_hot = np.eye(K, dtype=np.float32)[idx]
    if kind == "soft":
        one_hot = 0.8 * one_hot + 0.2 / K
    return bf16_to_f32(f32_to_bf16(one_hot))


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}" for m, k in SHAPES])
def test_softmax_on_bf16_is_the_widening_paths_bits(monkeypatch, shape):
    calls, original = [], KernelModules.run_bf16_op
    monkeypatch.setattr(KernelModules, "run_bf16_op", lambda self, *args, **kwargs: (
        calls.append(original(self, *args, **kwargs)) or calls[-1]))
    f32, bf16 = _backends()
    logits = _logits(*shape)
    wide = f32.empty(shape)
    f32.softmax(f32.array(logits), wide)
    out = bf16.empty(shape)
    bf16.softmax(bf16.array(logits), out)
    assert calls == [True], "the bf16 kernel took the call"
    np.testing.assert_array_equal(out._ary, f32_to_bf16(wide.get()))
    assert not bf16.bf16_boundary._work


@pytest.mark.parametrize("kind", ["index", "one_hot", "soft"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}" for m, k in SHAPES])
def test_softmax_cross_entropy_on_bf16_is_the_widening_paths_bits(monkeypatch, shape, kind):
    calls, original = [], softmax.softmax_cross_entropy_kernel

    def counted(*args, **kwargs):
        calls.append(kwargs.get("bf16", False))
        return original(*args, **kwargs)
    monkeypatch.setattr(softmax, "softmax_cross_entropy_kernel", counted)
    f32, bf16 = _backends()
    logits, targets = _logits(*shape), _targets(*shape, kind)
    tdtype = np.int32 if kind == "index" else None
    results = []
    for be in (f32, bf16):
        probs, grad = be.empty(shape), be.empty(shape)
        loss = be.softmax_cross_entropy(be.array(logits), be.array(targets, dtype=tdtype),
                                        probs, grad, 0.25)
        results.append((loss, probs, grad))
    assert calls == [False, True], "the bf16 kernel took the call"
    (want_loss, want_p, want_g), (loss, probs, grad) = results
    np.testing.assert_array_equal(probs._ary, f32_to_bf16(want_p.get()))
    np.testing.assert_array_equal(grad._ary, f32_to_bf16(want_g.get()))
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert not bf16.bf16_boundary._work


def test_bf16_cross_entropy_is_bit_identical_on_1_2_and_3_threads():
    threads, results = openmp_threads(), []
    try:
        for n in (1, 2, 3):
            set_cpu_threads(n)
            be = _backends()[1]
            shape = SHAPES[0]
            probs, grad = be.empty(shape), be.empty(shape)
            loss = be.softmax_cross_entropy(be.array(_logits(*shape)),
                                            be.array(_targets(*shape, "index"), dtype=np.int32),
                                            probs, grad)
            results.append((loss, probs._ary.copy(), grad._ary.copy()))
    finally:
        set_cpu_threads(threads)
    for loss, probs, grad in results[1:]:
        assert loss == results[0][0]
        np.testing.assert_array_equal(probs, results[0][1])
        np.testing.assert_array_equal(grad, results[0][2])


def test_a_class_index_out_of_range_is_one_index_error_naming_it():
    be = _backends()[1]
    targets = _targets(7, 11, "index")
    targets[4] = 11
    probs, grad = be.empty((7, 11)), be.empty((7, 11))
    with pytest.raises(IndexError, match="11"):
        be.softmax_cross_entropy(be.array(_logits(7, 11)), be.array(targets, dtype=np.int32),
                                 probs, grad)
