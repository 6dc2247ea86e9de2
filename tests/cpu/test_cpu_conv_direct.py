"""The direct convolution kernels (``kernels/cpu/conv_direct.c``) against the numpy reference.

They run where the output channels fill whole vector registers (16 floats with AVX-512, 8
without), so the cases here have K (and, for the data gradient, C) a multiple of 16; the shapes
are otherwise odd: batch 1, non-square images and filters, C = 1 and C = 3, stride > filter,
padding, dilation, pixel counts that leave partial register blocks.
"""
from functools import partial

import numpy as np
import pytest

from support.requires import requires

from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.conv import CPUConvPlan
from neonlite.backends.reference import conv as numpy_conv
from neonlite.backends.plans import ConvPlan


pytestmark = requires("compiler")
DTYPES = (np.float32, np.float64)
TOL = {np.dtype(np.float32): 3e-5, np.dtype(np.float64): 1e-12}

# (N, H, W, C, K, R, S, pad, stride, dilation, data gradient direct?)
CASES = [
    (1, 7, 5, 3, 16, 3, 3, (1, 1), (1, 1), (1, 1), False),   # batch 1, non-square, C=3
    (2, 9, 11, 1, 32, 5, 5, (2, 2), (1, 1), (1, 1), False),  # LeNet conv1 shape, small
    (3, 6, 7, 16, 48, 3, 2, (1, 0), (1, 1), (1, 1), True),   # three registers, C=16
    (2, 8, 9, 32, 64, 5, 5, (2, 2), (1, 1), (1, 1), True),   # LeNet conv2 shape, small
    (2, 9, 8, 16, 16, 2, 2, (0, 0), (3, 3), (1, 1), False),  # stride > filter
    (2, 9, 10, 32, 16, 3, 3, (2, 2), (1, 1), (2, 2), True),  # dilation, padding
    (2, 4, 4, 16, 32, 5, 5, (2, 2), (1, 1), (1, 1), True),   # filter larger than input
    (2, 13, 29, 16, 64, 3, 3, (1, 1), (1, 1), (1, 1), True),  # 29 pixels: partial blocks
]


@pytest.fixture(scope="module")
def kernels():
    found = KernelModules()
    for dtype in DTYPES:
        assert found.module("conv_direct", np.dtype(dtype)) is not None, \
            f"direct conv kernels failed to build: {found.unavailable_reason()}"
    return found


def close(actual, expected, dtype):
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOL[np.dtype(dtype)] * scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_direct_conv_matches_numpy(kernels, case, dtype):
    N, H, W, C, K, R, S, pad, stride, dil, direct_bprop = case
    dtype = np.dtype(dtype)
    plan = CPUConvPlan(N, C, H, W, K, R, S, pad, stride, dil, dtype=dtype, kernels=kernels)
    ref = ConvPlan(N, C, H, W, K, R, S, pad, stride, dil)
    assert plan.algorithm == "direct"
    if dtype == np.float32:  # float64 blocks are twice the bytes: some go to the GEMM path
        assert (plan.bprop_algorithm == "direct") == direct_bprop
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, H, W, C)).astype(dtype)
    f = rng.standard_normal((R, S, C, K)).astype(dtype)
    e = rng.standard_normal(plan.out_shape).astype(dtype)

    out = np.full(plan.out_shape, np.nan, dtype)
    expected = np.empty(plan.out_shape, dtype)
    assert plan.fprop(x, f, out)
    numpy_conv.fprop_conv(ref, x, f, expected)
    close(out, expected, dtype)

    for beta in (0.0, 1.0):
        got = np.full(f.shape, np.nan, dtype) if beta == 0 else rng.standard_normal(f.shape)
        got = got.astype(dtype)
        want = np.zeros_like(got) if beta == 0 else got.copy()
        assert plan.update(x, e, got, beta)
        numpy_conv.update_conv(ref, x, e, want, beta)
        close(got, want, dtype)

    for beta in (0.0, 0.5):
        got = (np.full(x.shape, np.nan) if beta == 0 else rng.standard_normal(x.shape))
        got = got.astype(dtype)
        want = np.zeros_like(got) if beta == 0 else got.copy()
        assert plan.bprop(f, e, got, beta)
        numpy_conv.bprop_conv(ref, f, e, want, beta)
        close(got, want, dtype)


def test_direct_conv_declines_partial_registers_and_big_filters(kernels):
    f32 = np.dtype(np.float32)
    plan = partial(CPUConvPlan, kernels=kernels, dtype=f32)
    assert plan(2, 3, 8, 8, 20, 3, 3, (1, 1)).direct is None  # K=20
    assert plan(2, 16, 8, 8, 16, 1, 1).direct is None  # 1x1: a GEMM
    assert plan(2, 512, 8, 8, 64, 3, 3, (1, 1)).direct is None  # 1.2 MB
    strided = CPUConvPlan(2, 16, 8, 8, 16, 3, 3, (1, 1), (2, 2), dtype=f32, kernels=kernels)
    assert strided.direct is not None
    assert strided.direct_transposed is None


def test_direct_conv_batch_smaller_than_plan(kernels):
    """A last batch shorter than the plan's N runs on its own images only."""
    plan = CPUConvPlan(4, 3, 6, 6, 16, 3, 3, (1, 1), dtype=np.float32, kernels=kernels)
    ref = ConvPlan(4, 3, 6, 6, 16, 3, 3, (1, 1))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    f = rng.standard_normal((3, 3, 3, 16)).astype(np.float32)
    out, want = np.empty((2, 6, 6, 16), np.float32), np.empty((2, 6, 6, 16), np.float32)
    assert plan.fprop(x, f, out)
    numpy_conv.fprop_conv(ref, x, f, want)
    close(out, want, np.float32)
