"""``neonlite doctor``: the table's rows, the exit status per backend, and bad machines: a
pycuda that does not import, a driver that hangs or fails, a kernel cache that is a file, not
writable or damaged, and no C compiler on PATH (the training run then falls back to numpy with
one notice).  A stand-in ``pycuda`` package on PYTHONPATH plays the broken drivers."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neonlite.cli import main
from neonlite.doctor import collect
from neonlite.doctor.gpu_rows import gpu_rows
from neonlite.kernels.cache import DiskCache, entry_name
from support.harness import CHECKOUT

ROOT = CHECKOUT
ROWS = ("Python", "numpy", "BLAS", "C compiler", "test kernel", "OpenMP", "CPU", "bf16",
        "JPEG decoder", "kernel cache", "nvcc", "pycuda", "CUDA driver", "MPI")


def fake_pycuda(tmp_path, driver_body):
    """A folder holding a stand-in ``pycuda`` whose ``driver`` module is ``driver_body``."""
    package = tmp_path / "fake" / "pycuda"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('VERSION_TEXT = "2099.1"\n')
    (package / "driver.py").write_text(textwrap.dedent(driver_body))
    return str(tmp_path / "fake")


def doctor(*flags, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "neonlite.cli", "doctor", *flags],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env or dict(os.environ))


def row(text, name):
    """The table line of row ``name`` in doctor's output ``text`` (and its fix line)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line[6:].startswith(name + " ") and line[:5].strip():
            fix = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].strip().startswith("->") \
                else ""
            return line, fix
    raise AssertionError(f"no row {name!r} in:\n{text}")


def test_the_table_has_every_row_and_the_cpu_backend_exits_0(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ROWS:
        row(out, name)
    assert out.splitlines()[-1].startswith("the cpu backend can run here")


def test_the_jpeg_row_names_the_decoder_in_use(monkeypatch):
    from neonlite.doctor.jpeg_row import jpeg_row
    from neonlite.data.jpeg_kernel import jpeg_module
    found = jpeg_row()
    if jpeg_module() is not None:
        assert found.status == "ok" and "region-of-interest kernel on libjpeg" in found.found
    else:
        assert found.status == "warn" and found.found.startswith("Pillow")
    monkeypatch.setenv("NEONLITE_JPEG_KERNEL", "0")
    off = jpeg_row()
    assert off.status == "warn" and "NEONLITE_JPEG_KERNEL=0" in off.found
    assert off.fix == "unset the variable to use the kernel" and "Pillow" in off.found


def test_gpu_without_pycuda_exits_1_with_one_line(tmp_path):
    fake = fake_pycuda(tmp_path, 'raise ImportError("libcuda.so.1: cannot open shared object")')
    done = doctor("-b", "gpu", env=dict(os.environ, PYTHONPATH=fake))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "neonlite: error: the gpu backend cannot run here: pycuda does not import "
        "(ImportError: libcuda.so.1: cannot open shared object)"]
    line, fix = row(done.stdout, "pycuda")
    assert line.startswith("FAIL") and "pip install 'neonlite[gpu]'" in fix


def test_a_hanging_driver_is_a_row_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", fake_pycuda(tmp_path, """
        import time
        def get_version():
            return (12, 4, 0)
        def init():
            time.sleep(600)
        """))
    start = time.monotonic()
    rows, reason = gpu_rows(needed=True, timeout=3)
    assert time.monotonic() - start < 60
    assert "did not finish within 3 s" in reason
    assert [r.status for r in rows if r.name == "CUDA driver"] == ["FAIL"]


def test_a_failing_driver_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", fake_pycuda(tmp_path, """
        class Error(Exception):
            pass
        def get_version():
            return (12, 4, 0)
        def init():
            raise Error("cuInit failed: forward compatibility was attempted on non supported HW")
        """))
    rows, reason = gpu_rows(needed=True, timeout=60)
    driver = next(r for r in rows if r.name == "CUDA driver")
    assert driver.status == "FAIL" and "forward compatibility" in driver.found
    assert "nvidia-smi" in driver.fix and reason == driver.found


def test_devices_are_listed_with_name_capability_and_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", fake_pycuda(tmp_path, """
        class Device:
            def __init__(self, i):
                self.i = i
            @staticmethod
            def count():
                return 2
            def name(self):
                return f"Fake GPU {self.i}"
            def compute_capability(self):
                return (9, 0)
            def total_memory(self):
                return 80 * 2**30
        def get_version():
            return (12, 4, 0)
        def init():
            pass
        def get_driver_version():
            return 12040
        """))
    rows, reason = gpu_rows(needed=True, timeout=60)
    names = {r.name: r for r in rows}
    assert names["device 1"].found == "Fake GPU 1, compute capability 9.0 (sm_90), 80.0 GiB"
    assert names["CUDA driver"].found == "CUDA 12.4"
    assert reason is not None and names["gpu backend"].status == "FAIL"


def _cache_row(capsys):
    status = main(["doctor"])
    out = capsys.readouterr().out
    return status, *row(out, "kernel cache"), out.splitlines()[-1]


def test_a_cache_dir_that_is_a_file_is_one_failing_row(tmp_path, monkeypatch, capsys):
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "cache"))
    status, line, fix, last = _cache_row(capsys)
    assert status == 0
    assert line.startswith("FAIL") and line.endswith("is a file, not a folder")
    assert "NEONLITE_CACHE_DIR" in fix
    assert "without its compiled kernels" in last
    rows, reason = collect("gpu", probe_timeout=60)
    assert reason is not None


def test_an_unwritable_cache_is_reported(tmp_path, monkeypatch, capsys):
    if os.geteuid() == 0:
        folder = Path("/proc/sys")          # root writes anywhere else
    else:
        folder = tmp_path / "cache"
        folder.mkdir()
        folder.chmod(0o500)
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(folder))
    status, line, fix, _ = _cache_row(capsys)
    assert status == 0 and line.startswith("FAIL") and "is not writable" in line
    assert "NEONLITE_CACHE_DIR" in fix


def test_a_damaged_cache_entry_is_reported_with_how_to_clear_it(tmp_path, monkeypatch, capsys):
    cache = DiskCache(tmp_path / "cache")
    cache.write(entry_name("whole", "a" * 64, ".so"), b"payload", {"ok": 1})
    damaged = cache.write(entry_name("damaged", "b" * 64, ".so"), b"payload", {"ok": 1})
    damaged.write_bytes(damaged.read_bytes()[:-5])
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "cache"))
    status, line, fix, _ = _cache_row(capsys)
    assert status == 0 and line.startswith("warn") and "2 entries, 1 damaged" in line
    assert "neonlite kernels clean" in fix
    assert main(["kernels", "clean"]) == 0
    capsys.readouterr()
    _, line, _, _ = _cache_row(capsys)
    assert line.startswith("ok") and "0 entries" in line


def test_no_c_compiler_on_path_is_reported_and_training_falls_back_to_numpy(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "NEONLITE_CC")}
    (tmp_path / "empty-bin").mkdir()
    env.update(PATH=str(tmp_path / "empty-bin"), NEONLITE_CACHE_DIR=str(tmp_path / "c"))
    done = doctor(env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line, fix = row(done.stdout, "C compiler")
    assert line.startswith("FAIL") and "no C compiler" in line and "NEONLITE_CC" in fix
    assert "without its compiled kernels" in done.stdout.splitlines()[-1]

    train = subprocess.run([sys.executable, "-m", "neonlite.cli", "train",
                            str(ROOT / "examples" / "shapes_cnn.yaml"), "-e", "1",
                            "--max-batches", "2"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=300)
    assert train.returncode == 0, train.stderr
    notices = [x for x in train.stderr.splitlines() if "without its compiled kernels" in x]
    assert len(notices) == 1 and "no C compiler" in notices[0], train.stderr


def test_selftest_needs_the_gpu_flag(capsys):
    assert main(["doctor", "--selftest"]) == 1
    assert "neonlite doctor --gpu --selftest" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["build", "list", "clean"])
def test_kernels_commands_say_once_that_the_cache_dir_is_a_file(tmp_path, monkeypatch, capsys,
                                                                action):
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["kernels", action]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"neonlite: error: the kernel cache {tmp_path / 'cache'} is a file, not a folder: set "
        f"NEONLITE_CACHE_DIR to a folder ('neonlite doctor' checks the cache)"]


def test_doctor_and_the_profiler_name_the_cpu_the_same_way(capsys):
    """One name for the CPU: ``doctor``'s CPU row and the profiler's peak line both say
    ``cpu_names()`` (model, microarchitecture, -march=native target), once each."""
    from neonlite.cpu_peak import cpu_names
    from neonlite.kernels.first_use import cpu_name
    from neonlite.profiler.peak import machine_peak
    try:
        target = cpu_name()
    except Exception as err:  # no C compiler: the name says so instead
        pytest.skip(f"no C compiler: {err}")
    names = cpu_names()
    assert f"-march=native: {target})" in names
    main(["doctor"])
    table = capsys.readouterr().out
    cpu_line = next(line for line in table.splitlines() if " CPU " in line)
    assert names in cpu_line and table.count(f": {target}") == 1, table
    note = machine_peak("cpu")[1]
    assert names in note and note.count(target) == 1, note


def test_the_mpi_row_says_when_mpirun_needs_oversubscribe():
    from neonlite.doctor.cpu_rows import mpi_row
    from neonlite.doctor.report import OK
    row = mpi_row()
    if row.status != OK:
        pytest.skip(f"no MPI here: {row.found}")
    assert f"more ranks than cores (here {os.cpu_count()} CPUs) need mpirun --oversubscribe" \
        in row.found
