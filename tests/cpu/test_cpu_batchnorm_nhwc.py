"""Batch norm's C kernels on NHWC rows (``kernels/cpu/batchnorm_nhwc.h``, ``column_sums.h``):
channel counts that fill no whole vector register (the lanes of a period, and rows wider than
the longest period), row counts that are no multiple of the row blocks or of a period, the
fused ReLU and its mask, float64 against the numpy reference, and the same bits on 1, 2 and 3
threads (the row blocks are fixed by the shape, not by the thread count)."""
import os

import numpy as np
import pytest

from support.requires import requires
from support.table_kernels import run_kernel

from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.norm import batchnorm_moments_kernel
from neonlite.backends.cpu.threads import set_cpu_threads
from neonlite.backends.reference import norm as numpy_norm

pytestmark = requires("compiler")

# (M, C): C of whole vectors (16, 64), of none (1, 3, 17, 100), rows wider than a period of
# whole vectors allows (257, 1001: one row a period, its last lanes one by one); M of one row,
# fewer rows than blocks or than a period, and many rows that fill neither evenly (large
# enough for the threads)
SHAPES = [(1, 17), (5, 3), (33, 17), (4099, 3), (3001, 17), (2055, 16), (1027, 33),
          (515, 100), (1001, 64), (129, 257), (40, 1001), (37, 1)]


@pytest.fixture(scope="module")
def kernels():
    return KernelModules()


def _inputs(M, C, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, C)) * rng.uniform(0.1, 3, C) + rng.normal(size=C) * 4
    per_channel = {"gamma": rng.standard_normal((1, C)) + 0.5,
                   "beta": rng.standard_normal((1, C)),
                   "rm": rng.standard_normal((1, C)), "rv": np.abs(rng.standard_normal((1, C))) + 0.5}
    return ({k: v.astype(dtype) for k, v in per_channel.items()}, x.astype(dtype),
            rng.standard_normal((M, C)).astype(dtype), rng.standard_normal((M, C)).astype(dtype))


def _run_c(kernels, p, x, dy, dx0, relu, beta_acc):
    """The kernels' fprop (training) and bprop: [y, xhat, mean, invstd, rm, rv, dx, dg, db]."""
    M, C = x.shape
    y, xhat = np.empty_like(x), np.empty_like(x)
    mean, invstd = np.empty((1, C), x.dtype), np.empty((1, C), x.dtype)
    rm, rv = p["rm"].copy(), p["rv"].copy()
    assert run_kernel(kernels, "batchnorm_fprop", x, p["gamma"], p["beta"], y, xhat, mean,
                      invstd, rm, rv, 1e-5, 0.9, False, relu)
    dx, dg, db = dx0.copy(), np.full((1, C), 0.5, x.dtype), np.full((1, C), -0.5, x.dtype)
    assert run_kernel(kernels, "batchnorm_bprop", dy, xhat, invstd, p["gamma"], dx, dg, db,
                      beta_acc, y if relu else None)
    return [y, xhat, mean, invstd, rm, rv, dx, dg, db]


def _run_numpy(p, x, dy, dx0, relu, beta_acc):
    """The same from the numpy reference (ReLU and its mask applied around it)."""
    M, C = x.shape
    y, xhat = np.empty_like(x), np.empty_like(x)
    mean, invstd = np.empty((1, C), x.dtype), np.empty((1, C), x.dtype)
    rm, rv = p["rm"].copy(), p["rv"].copy()
    numpy_norm.batchnorm_fprop(x, p["gamma"], p["beta"], y, xhat, mean, invstd, rm, rv, 1e-5,
                               0.9, False)
    if relu:
        np.maximum(y, 0, out=y)
    dx, dg, db = dx0.copy(), np.full((1, C), 0.5, x.dtype), np.full((1, C), -0.5, x.dtype)
    numpy_norm.batchnorm_bprop(dy * (y > 0) if relu else dy, xhat, invstd, p["gamma"], dx, dg,
                               db, beta_acc=beta_acc)
    return [y, xhat, mean, invstd, rm, rv, dx, dg, db]


NAMES = "y xhat mean invstd running_mean running_var dx dgamma dbeta".split()


@pytest.mark.parametrize("M,C", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
def test_float64_batchnorm_matches_numpy_on_any_channel_count(kernels, M, C, relu):
    p, x, dy, dx0 = _inputs(M, C, np.float64)
    for beta_acc in (0.0, 1.0):
        got = _run_c(kernels, p, x, dy, dx0, relu, beta_acc)
        want = _run_numpy(p, x, dy, dx0, relu, beta_acc)
        for name, g, w in zip(NAMES, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-11 * max(1.0, np.abs(w).max()),
                                       err_msg=f"{name}, beta_acc={beta_acc}")


@pytest.mark.parametrize("M,C", SHAPES, ids=lambda v: str(v))
def test_float32_batchnorm_stays_close_to_float64(kernels, M, C):
    """float32 lanes (the backward's sums run in float for CS_RUN super-periods, then in
    double) against the float64 reference of the same float32 inputs."""
    p, x, dy, dx0 = _inputs(M, C, np.float32)
    got = _run_c(kernels, p, x, dy, dx0, True, 1.0)
    wide = {k: v.astype(np.float64) for k, v in p.items()}
    want = _run_numpy(wide, x.astype(np.float64), dy.astype(np.float64),
                      dx0.astype(np.float64), True, 1.0)
    for name, g, w in zip(NAMES, got, want):
        # the ReLU's mask may differ where y is within float rounding of 0
        if name == "dx":
            keep = np.abs(want[0]) > 1e-4
            g, w = g[keep], w[keep]
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(w).max()),
                                   err_msg=name)


def test_the_relu_keeps_nan_and_its_mask_drops_it(kernels):
    """y = max(y, 0) keeps a NaN of x (a loss scaler must see it); the backward counts dy only
    where y > 0, so a NaN of y masks its dy out, as the reference's dy * (y > 0) does."""
    M, C = 64, 17
    p, x, dy, dx0 = _inputs(M, C, np.float32)
    x[3, 5] = np.nan
    y, xhat = np.empty_like(x), np.empty_like(x)
    mean, invstd = np.empty((1, C), x.dtype), np.empty((1, C), x.dtype)
    assert run_kernel(kernels, "batchnorm_fprop", x, p["gamma"], p["beta"], y, xhat, mean,
                      invstd, p["rm"].copy(), p["rv"].copy(), 1e-5, 0.9, False, True)
    assert np.isnan(y[:, 5]).all() and not np.isnan(np.delete(y, 5, axis=1)).any()
    y[:, 5] = 0.0
    xhat[:, 5] = 0.0
    invstd[0, 5] = 1.0
    y[7, 2] = np.nan
    dx, dg, db = np.empty_like(x), np.zeros((1, C), x.dtype), np.zeros((1, C), x.dtype)
    assert run_kernel(kernels, "batchnorm_bprop", dy, xhat, invstd, p["gamma"], dx, dg, db,
                      0.0, y)
    assert np.isfinite(dx).all() and np.isfinite(dg).all() and np.isfinite(db).all()
    np.testing.assert_allclose(db[0, 2], dy[(y[:, 2] > 0), 2].sum(dtype=np.float64), rtol=1e-5)


def _every_output(kernels, p, x, dy, dx0):
    """Batch norm (fused ReLU and plain, fprop and bprop), its moments and layer norm's
    backward sums on x: every array the kernels write."""
    outs = _run_c(kernels, p, x, dy, dx0, True, 0.0) + _run_c(kernels, p, x, dy, dx0, False, 1.0)
    C = x.shape[1]
    mean, m2 = np.empty(C), np.empty(C)
    assert batchnorm_moments_kernel(kernels, x, mean, m2)
    dx, dg, db = np.empty_like(x), np.zeros((1, C), x.dtype), np.zeros((1, C), x.dtype)
    invstd = np.ones((x.shape[0], 1), x.dtype)
    assert run_kernel(kernels, "layernorm_bprop", dy, x, invstd, p["gamma"], dx, dg, db)
    return outs + [mean, m2, dx, dg, db]


@pytest.mark.parametrize("M,C", [(32 * 32 * 32, 16), (3001, 17), (515, 100), (40, 1001)],
                         ids=lambda v: str(v))
def test_batchnorm_is_the_same_on_any_thread_count(kernels, M, C):
    p, x, dy, dx0 = _inputs(M, C, np.float32)
    results = []
    try:
        for threads in (1, 2, 3):
            set_cpu_threads(threads)
            results.append(_every_output(kernels, p, x, dy, dx0))
    finally:
        set_cpu_threads(len(os.sched_getaffinity(0)))
    for other in results[1:]:
        for i, (a, b) in enumerate(zip(results[0], other)):
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")


EMPTY_CALLS = """
import numpy as np
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.norm import batchnorm_moments_kernel
from neonlite.backends.ops import OPS
kernels = KernelModules()
M, C = {M}, {C}
x = np.zeros((M, C), np.float32)
y, xhat, dx = np.empty_like(x), np.empty_like(x), np.empty_like(x)
row = lambda: np.zeros((1, C), np.float32)
for inference in (False, True):
    assert kernels.run_op(OPS["batchnorm_fprop"], (x, row(), row(), y, xhat, row(), row(),
                                                   row(), row() + 1), (1e-5, 0.9, inference, True))
assert kernels.run_op(OPS["batchnorm_apply"], (x, row(), row(), y, xhat, row(), row()),
                      (True,))
assert kernels.run_op(OPS["batchnorm_bprop"], (x, xhat, row(), row(), dx, row(), row(), y),
                      (0.0,))
assert batchnorm_moments_kernel(kernels, x, np.empty(C), np.empty(C))
print("done")
"""


@pytest.mark.parametrize("M,C", [(0, 16), (16, 0), (0, 0)])
def test_batchnorm_of_no_rows_or_no_channels_runs(M, C):
    """An empty batch or a layer of no channels: nothing to compute, and no crash (the period
    of 0 channels once divided by zero); each case in its own process, as a crash would end
    the test run."""
    from support.isolated import python_argv, run_isolated
    run = run_isolated(python_argv(EMPTY_CALLS.format(M=M, C=C)), memory_mib=2048, seconds=120)
    assert run.outcome == "success" and run.stdout.strip() == "done", (run.outcome, run.stderr)
