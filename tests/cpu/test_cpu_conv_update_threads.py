"""The weight gradient of a convolution (``update_conv``) is cut into partial sums by the shape
alone (``kernels/cpu/conv_update_blocks.h``), not by the thread count: the same bits on 1, 2
and 3 threads, on the direct kernels and on the tiled patch GEMMs, and float32 sums short
enough that the result stays close to float64."""
import os

import numpy as np
import pytest

from support.requires import requires

from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.cpu.conv import CPUConvPlan
from neonlite.backends.cpu.threads import set_cpu_threads
from neonlite.backends.plans import ConvPlan
from neonlite.backends.reference import conv as numpy_conv

pytestmark = requires("compiler")

# (N, H, W, C, K, R, S, algorithm): 3x3 filters, padding 1
CASES = [
    (8, 32, 32, 16, 16, 3, 3, "direct"),   # a CIFAR ResNet stage: 8192 output pixels
    (32, 32, 32, 3, 16, 3, 3, "direct"),   # its first layer: 32768 pixels of 27 taps
    (8, 16, 16, 16, 20, 3, 3, "tiled"),    # 20 output channels: not whole vector registers
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[-1]}-{c[0]}x{c[1]}x{c[2]}x{c[3]}")
def test_update_conv_is_the_same_on_any_thread_count(case):
    N, H, W, C, K, R, S, algorithm = case
    ref = ConvPlan(N, C, H, W, K, R, S, (1, 1), (1, 1), (1, 1))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, H, W, C))
    e = rng.standard_normal((N, ref.P, ref.Q, K))
    exact = np.zeros((R, S, C, K))
    numpy_conv.update_conv(ref, x, e, exact)
    results = []
    try:
        for threads in (1, 2, 3):
            set_cpu_threads(threads)
            kernels = KernelModules()
            plan = CPUConvPlan(N, C, H, W, K, R, S, (1, 1), (1, 1), (1, 1),
                                     dtype=np.float32, kernels=kernels)
            if plan.algorithm != algorithm:
                pytest.skip(f"the {algorithm} pass is not available here (plan chose "
                            f"{plan.algorithm}: {kernels.unavailable_reason()})")
            out = np.zeros((R, S, C, K), np.float32)
            assert plan.update(x.astype(np.float32), e.astype(np.float32), out)
            results.append(out)
    finally:
        set_cpu_threads(len(os.sched_getaffinity(0)))
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)
    error = np.linalg.norm(results[0] - exact) / np.linalg.norm(exact)
    assert error < 1e-6, f"float32 weight gradient {error:.2e} from float64"
