"""``neonlite doctor --gpu --selftest``: every family's comparison runs here on the real GPU
backend over the host emulator (``gpu_host_backend``) and passes; a wrong kernel result fails
its family and the exit status; where pycuda does not import the command stops at once with
one line.  Compiled and emulated, not run on a GPU."""
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite.doctor.selftest import largest_error, run_families
from neonlite.doctor.selftest_families import FAMILIES

needs_emulator = requires("emulator")


@pytest.fixture
def factories(monkeypatch):
    previous = neonlite.backends._current

    def make_gpu(dtype):
        return host_gpu_backend(monkeypatch, dtype=dtype)

    def make_cpu():
        return neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    yield make_gpu, make_cpu
    neonlite.backends._current = previous


def test_the_families_are_the_ones_promised():
    names = " ".join(name for name, _, _ in FAMILIES)
    for family in ("conv simt", "conv tensor-core", "pooling", "batch norm", "layer norm",
                   "softmax + cross-entropy", "rows", "philox", "block-sparse", "cuBLAS GEMM",
                   "training step"):
        assert family in names


@needs_emulator
@pytest.mark.parametrize("family", FAMILIES, ids=[f[0].split(" (")[0] for f in FAMILIES])
def test_every_family_passes_on_the_emulated_gpu_backend(factories, family):
    out = io.StringIO()
    assert run_families(*factories, out, families=[family], device="host emulator") == 0, \
        out.getvalue()
    first = out.getvalue().splitlines()[0]
    assert first.startswith(f"pass  {family[0]}") and "max error" in first


@needs_emulator
def test_a_wrong_kernel_result_fails_its_family(factories, monkeypatch):
    from neonlite.backends.gpu.backend import GPUBackend
    right = GPUBackend.fprop_pool

    def off_by_a_little(self, plan, x, out, *args, **kwargs):
        right(self, plan, x, out, *args, **kwargs)
        out[:] = out + 1e-3
    monkeypatch.setattr(GPUBackend, "fprop_pool", off_by_a_little)
    pooling = [f for f in FAMILIES if f[0] == "pooling"]
    out = io.StringIO()
    assert run_families(*factories, out, families=pooling) == 1
    line = out.getvalue().splitlines()[0]
    assert line.startswith("FAIL  pooling") and "max error 1.0e-03 (tolerance 1e-05" in line
    assert "0 of 1 kernel families pass" in out.getvalue()


def test_a_family_that_raises_fails_and_the_rest_still_run(factories):
    def broken(make_gpu, make_cpu):
        raise RuntimeError("launch failed:\n  an illegal memory access")

    def fine(make_gpu, make_cpu):
        return [("x", np.ones(3), np.ones(3))]
    out = io.StringIO()
    assert run_families(*factories, out, families=[("broken", broken, 1e-4),
                                                   ("fine", fine, 1e-4)]) == 1
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("FAIL  broken") and \
        "RuntimeError: launch failed: an illegal memory access" in lines[0]
    assert lines[1].startswith("pass  fine")


def test_largest_error_is_relative_to_the_largest_magnitude():
    assert largest_error([("a", [101.0], [100.0]), ("b", [0.5], [0.0])]) == (0.5, "b")
    assert largest_error([("a", [np.nan], [1.0])])[0] == float("inf")
    assert largest_error([("a", [1.0, 2.0], [1.0])])[0] == float("inf")


def test_without_pycuda_it_stops_at_once_with_the_reason(tmp_path):
    fake = tmp_path / "fake" / "pycuda"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "driver.py").write_text('raise ImportError("No module named pycuda._driver")\n')
    done = subprocess.run([sys.executable, "-m", "neonlite.cli", "doctor", "--gpu",
                           "--selftest"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path / "fake")))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "neonlite: error: the GPU selftest cannot run here: pycuda does not import "
        "(ImportError: No module named pycuda._driver)"]
