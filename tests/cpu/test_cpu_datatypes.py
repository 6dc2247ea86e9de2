"""The CPU backend trains in f32, f64 or bf16 (bf16: ``tests/api/cli/test_cli_bf16.py``):
``-d f16`` on the CPU is refused in one line saying which data types it runs and why; the
numpy-only fallback says it is slower."""
import os
import subprocess
import sys

import numpy as np
import pytest
from support.harness import CHECKOUT

import neonlite
from neonlite.cli import main

ROOT = CHECKOUT


@pytest.fixture(autouse=True)
def keep_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def test_cli_refuses_float16_on_the_cpu_in_one_line(capsys, tmp_path):
    ckpt = tmp_path / "c.h5"
    status = main(["train", str(ROOT / "examples" / "shapes_cnn.yaml"), "-d", "f16",
                   "--max-batches", "1", "-e", "1", "--save-path", str(ckpt)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 1 and len(lines) == 1, captured.err
    assert lines[0].startswith("neonlite: error: datatype: the cpu backend runs f32, f64 and "
                               "bf16")
    assert "-b gpu" in lines[0]
    assert not ckpt.exists()


def test_f32_and_f64_still_train_on_the_cpu(capsys):
    for datatype in ("f32", "f64"):
        assert main(["train", str(ROOT / "examples" / "shapes_cnn.yaml"), "-d", datatype,
                     "--max-batches", "1", "-e", "1", "-q", "--eval-freq", "0"]) == 0


def test_numpy_fallback_notice_says_it_is_slower(tmp_path):
    script = ("import neonlite, numpy as np\n"
              "be = neonlite.gen_backend('cpu', batch_size=2)\n"
              "assert not be.kernels.active(np.float32)\n")
    env = dict(os.environ, NEONLITE_CPU_KERNELS="0")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "times slower" in lines[0], done.stderr


def test_python_api_refuses_float16_with_its_reason():
    with pytest.raises(ValueError, match=r"numpy emulates float16 about 150 times slower than "
                                         r"float32.*numpy_float16=True"):
        neonlite.gen_backend("cpu", batch_size=2, datatype=np.float16)


def test_python_api_keeps_float16_as_the_mixed_precision_reference_when_asked():
    be = neonlite.gen_backend("cpu", batch_size=2, datatype=np.float16, numpy_float16=True)
    assert be.dtype == np.float16
