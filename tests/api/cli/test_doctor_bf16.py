"""``neonlite doctor``'s bf16 row: each op class's path with its reason, and the measured bf16
and float32 peaks; a CPU without AVX512-BF16 (simulated) and a bad ``NEONLITE_BF16``."""
import pytest

from neonlite.backends.cpu.build import KernelModules
from neonlite.doctor.bf16_row import bf16_row
from neonlite.kernels.build import Builder
from support.requires import need, requires

pytestmark = requires("compiler")


@pytest.fixture
def kernels(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    return KernelModules(builder=Builder(cache))


def test_the_row_names_every_op_class_and_both_peaks(kernels):
    need("bf16")
    row = bf16_row(kernels)
    assert row.status == "ok", row
    for op_class in ("attention storage", "conv storage", "gemm "):
        assert op_class in row.found
    assert "measured" in row.found and "GFLOP/s against float32 arithmetic" in row.found
    assert "peaks: bf16 " in row.found and "GFLOP/s (gemm_bf16" in row.found
    assert "float32 " in row.found and "GFLOP/s (FMA)" in row.found


def test_without_avx512_bf16_the_row_says_storage_and_measures_no_bf16(kernels, monkeypatch):
    monkeypatch.setenv("NEONLITE_CPU_FEATURES_OFF", "avx512_bf16,amx_bf16")
    row = bf16_row(kernels)
    assert "gemm storage (AVX512-BF16 turned off" in row.found
    assert "peaks: bf16 not measured" in row.found


def test_a_bad_override_is_a_warning_row_with_the_fix(kernels, monkeypatch):
    monkeypatch.setenv("NEONLITE_BF16", "sometimes")
    row = bf16_row(kernels)
    assert row.status == "warn" and "NEONLITE_BF16='sometimes'" in row.found
    assert "compute, storage or off" in row.fix
