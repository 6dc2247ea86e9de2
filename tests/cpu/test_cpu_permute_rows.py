"""The CPU row-copy kernel behind ``permute_axes`` (the head split/merge copies of attention)
between strided views."""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite.backends.cpu.rows import permute_axes_kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("head", [4, 8, 16, 32, 64])  # rows of 64, 128, 256 bytes and others
def test_cpu_permute_axes_between_strided_views(dtype, head):
    be = make_backend("cpu", dtype=dtype)
    if be.kernels.module("rows", np.dtype(dtype)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(1)
    proj = rng.normal(size=(3, 5, 12, head)).astype(dtype)
    src = proj[:, :, 4:8]  # (3, 5, 4, head), a strided view
    for axes in [(0, 2, 1, 3), (2, 0, 1, 3), (1, 2, 0, 3)]:
        out = np.full(tuple(src.shape[a] for a in axes), np.nan, dtype)
        assert permute_axes_kernel(be.kernels, src, out, axes)
        np.testing.assert_array_equal(out, np.transpose(src, axes))
        back = np.zeros_like(proj)
        inverse = tuple(np.argsort(axes))
        assert permute_axes_kernel(be.kernels, out, back[:, :, 4:8], inverse)
        np.testing.assert_array_equal(back[:, :, 4:8], src)
        assert not back[:, :, :4].any() and not back[:, :, 8:].any()
    assert not permute_axes_kernel(be.kernels, src, np.empty((3, 4, head, 5), dtype), (0, 2, 3, 1))
    t = be.array(src)
    out = be.zeros((3, 5, head, 4))
    be.permute_axes(t, out, (0, 1, 3, 2))  # the last axis moves: numpy's path
    np.testing.assert_array_equal(out.get(), np.transpose(src, (0, 1, 3, 2)))
