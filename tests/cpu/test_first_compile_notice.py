"""First use of the C kernels: one notice on stderr naming how many kernels compile, for
which CPU and where they are cached, with a count; compile time is not counted in samples/s."""
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.harness import CHECKOUT

from neonlite.callbacks import ProgressBar
from neonlite.kernels import build
from neonlite.kernels.specs import cpu_variant
from neonlite.kernels.toolchain import CompilerNotFound, find_c_compiler

ROOT = CHECKOUT


@pytest.fixture(scope="module")
def compiler():
    try:
        return find_c_compiler()
    except CompilerNotFound as err:
        pytest.skip(f"no C compiler: {err}")


def test_first_run_says_once_what_it_compiles(compiler, tmp_path):
    """A cache holding all f32 kernels but two: the run compiles those two, says so in one
    notice, and a second run says nothing."""
    builder = build.default_builder()
    everything = [cpu_variant(stem, "float32") for stem in ("pool", "softmax", "optree",
                                                            "norm", "conv", "conv_direct",
                                                            "gelu", "attention_softmax",
                                                            "rows", "blocksparse")]
    builder.build_all("cpu", variants=everything, jobs=2)
    cache = tmp_path / "cache"
    shutil.copytree(builder.cache.root, cache)
    for path in cache.iterdir():
        if path.name.startswith(("pool_f32-", "softmax_f32-")):
            path.unlink()
    env = {**os.environ, "NEONLITE_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "neonlite.cli", "train", str(ROOT / "examples" /
               "shapes_cnn.yaml"), "-e", "1", "--max-batches", "2"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                           cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stderr
    notices = [line for line in first.stderr.splitlines() if line.startswith("compiling ")]
    cpu = compiler.target.rsplit("-", 1)[0]
    assert notices == [f"compiling 2 kernels for {cpu} (first use; cached in {cache})\u2026"]
    assert any(line.startswith("compiled 2/2 in ") for line in first.stderr.splitlines())
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert second.returncode == 0, second.stderr
    assert "compiling" not in second.stderr


class _Model:
    class be:
        bsz = 1000
    last_eval = None


def test_compile_time_is_left_out_of_samples_per_second():
    bar = ProgressBar(stream=io.StringIO())
    bar.model = _Model()
    bar.on_train_begin(range(1), 1)
    bar.on_epoch_begin(0)
    with build.default_builder().compiling():
        time.sleep(0.3)
    bar.on_minibatch_end(0, 0, 1.0)
    bar.on_epoch_end(0)
    line = bar.stream.getvalue().strip()
    rate = float(line.split("(")[1].split(" samples/s")[0].replace(",", ""))
    assert rate > 20_000, line
    assert "s of it compiling kernels" in line


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _FakeBuilder:
    """Three variants, none cached; build_all reports each one done."""

    class cache:
        root = Path("/cache")

    def status(self, spec, arch=None):
        return False, "not built"

    def build_all(self, target, jobs, variants, progress):
        for done in range(1, len(variants) + 1):
            progress(done, len(variants))
        return [type("Result", (), {"status": "built"})() for _ in variants]


def test_on_a_terminal_the_count_is_redrawn_in_place(monkeypatch):
    from neonlite.kernels import first_use
    monkeypatch.setattr(first_use, "cpu_name", lambda: "znver4")
    stream = _Terminal()
    first_use.compile_missing(_FakeBuilder(), ["a", "b", "c"], stream=stream)
    text = stream.getvalue()
    head = "compiling 3 kernels for znver4 (first use; cached in /cache)\u2026"
    assert text.startswith(f"{head} 0/3\r{head} 1/3\r{head} 2/3\r{head} 3/3\r{head} 3/3 in ")
    assert text.endswith(" s\n") and text.count("\n") == 1
