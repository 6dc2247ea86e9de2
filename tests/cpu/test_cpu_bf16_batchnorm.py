"""Batch norm's training passes on bfloat16 tensors of the CPU backend by their bf16 C kernels
(``batchnorm_fprop_train_bf16``, ``batchnorm_bprop_bf16`` in ``kernels/cpu/batchnorm_bf16.h``):
within bf16's rounding of the float64 reference, bit-identical on 1, 2 and 3 threads, and no
float32 work tensor kept by the bf16 boundary for them.

The bound (that of ``tests/backend/test_op_table_bf16.py`` for the dispatched rows).  The
inputs are bf16 values, widened exactly; the kernels sum over the rows in double and do the
per-element arithmetic in float32, as the float32 kernels do, so their unrounded result v is
within the float32 harness's tolerance of the float64 reference on the same inputs,
|v - want| <= t |want| + t (t = 2e-5); rounding v to bf16 moves it by at most 2^-8 |v|, so

    |got - want| <= (2^-8 + 1.01 t) |want| + 1.01 t.

The shapes are odd: C not a multiple of a vector's 16 lanes, M not a multiple of the row
blocks; the kernels read (M, C) in periods of lcm(C, 16) lanes where that is at most 512 (C 9:
16 rows a period; mnist_cnn's 20: 4 rows), else one row (70, LeNet's 64), and a row longer
than 512 lanes (600) keeps its lanes in the caller's work instead of the stack.
"""
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.reference import norm as reference
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16

pytestmark = [requires("compiler"), pytest.mark.usefixtures("keep_backend", "keep_threads")]

T = 2e-5
RTOL, ATOL = 2.0 ** -8 + 1.01 * T, 1.01 * T
#: (M, C)
SHAPES = [(1001, 9), (517, 70), (2003, 64), (301, 20), (65, 600)]
FPROP = ("x", "gamma", "beta", "y", "xhat", "mean", "invstd", "running_mean", "running_var")
BPROP = ("dy", "xhat", "invstd", "gamma", "dx", "dgamma", "dbeta")


def _rounded(a):
    return bf16_to_f32(f32_to_bf16(np.asarray(a, np.float32)))


def _inputs(M, C, seed=0):
    """float32 values of bf16 numbers: a batch norm's forward inputs and its backward's (xhat
    the normalized x, invstd positive, y a ReLU output for the mask)."""
    rng = np.random.default_rng(seed)
    x = _rounded(rng.normal(0.5, 2.0, (M, C)))
    xhat = _rounded((x - x.mean(0)) / x.std(0))
    return {"x": x, "gamma": _rounded(rng.normal(1, 0.5, (1, C))),
            "beta": _rounded(rng.normal(0, 0.5, (1, C))), "y": _rounded(rng.normal(size=(M, C))),
            "xhat": xhat, "mean": np.zeros((1, C), np.float32),
            "invstd": _rounded(rng.uniform(0.5, 1.5, (1, C))),
            "running_mean": _rounded(rng.normal(size=(1, C))),
            "running_var": _rounded(rng.uniform(0.5, 1.5, (1, C))),
            "dy": _rounded(rng.normal(size=(M, C))), "dx": _rounded(rng.normal(size=(M, C))),
            "dgamma": _rounded(rng.normal(size=(1, C))), "dbeta": _rounded(rng.normal(size=(1, C)))}


def _run(be, data, relu, mask, beta_acc):
    """The bits of every operand after the forward (``relu``) and the backward (``mask``:
    the forward's y masks dy; ``beta_acc``) on the bf16 backend ``be``."""
    t = {n: be.array(v) for n, v in data.items()}
    be.batchnorm_fprop(*(t[n] for n in FPROP), 1e-5, 0.9, False, relu=relu)
    forward = {n: t[n]._ary.copy() for n in FPROP}
    b = {n: be.array(data[n]) for n in BPROP}
    be.batchnorm_bprop(*(b[n] for n in BPROP), beta_acc=beta_acc,
                       y=be.array(data["y"]) if mask else None)
    return forward, {n: b[n]._ary.copy() for n in BPROP}


def _within(name, got, want):
    got = bf16_to_f32(got).astype(np.float64)
    err, bound = np.abs(got - want), RTOL * np.abs(want) + ATOL
    assert (err <= bound).all(), (name, float((err - bound).max()))


@pytest.mark.parametrize("M, C", SHAPES)
@pytest.mark.parametrize("relu, mask, beta_acc", [(False, False, 0.0), (True, True, 0.5)])
def test_bf16_batchnorm_is_within_the_bound_of_the_reference(M, C, relu, mask, beta_acc):
    data = _inputs(M, C)
    forward, backward = _run(neonlite.gen_backend("cpu", batch_size=4, datatype="bf16"), data,
                             relu, mask, beta_acc)
    want = {n: data[n].astype(np.float64) for n in data}
    reference.batchnorm_fprop(*(want[n] for n in FPROP), 1e-5, 0.9, False, relu)
    for name in FPROP[3:]:
        _within(name, forward[name], want[name])
    want = {n: data[n].astype(np.float64) for n in data}
    reference.batchnorm_bprop(*(want[n] for n in BPROP), y=want["y"] if mask else None,
                              beta_acc=beta_acc)
    for name in ("dx", "dgamma", "dbeta"):
        _within(name, backward[name], want[name])


@pytest.mark.parametrize("M, C", SHAPES)
def test_bf16_batchnorm_is_bit_identical_on_1_2_3_threads(M, C):
    data = _inputs(M, C, seed=3)
    runs = []
    for threads in (1, 2, 3):
        be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
        be.set_threads(threads)
        runs.append(_run(be, data, True, True, 0.5))
    for forward, backward in runs[1:]:
        for name in FPROP:
            np.testing.assert_array_equal(forward[name], runs[0][0][name], err_msg=name)
        for name in BPROP:
            np.testing.assert_array_equal(backward[name], runs[0][1][name], err_msg=name)


def test_bf16_batchnorm_runs_its_kernels_and_keeps_no_float32_work_copies():
    """The training forward (a row whose kernel is chosen by ``inference``) and the backward
    take their bf16 C functions; the boundary widened all nine and seven operands into kept
    float32 work tensors before (about 5x float32's time on LeNet's shape)."""
    be = neonlite.gen_backend("cpu", batch_size=4, datatype="bf16")
    _run(be, _inputs(2003, 64), True, True, 0.0)
    kept = {key[0][0] for holder in be.bf16_boundary.holders() for key in holder}
    assert not kept & {"batchnorm_fprop", "batchnorm_bprop"}, kept
