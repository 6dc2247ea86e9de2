"""``-d bf16`` on the CPU (issue 36, the recipe): ``train``, ``eval``, ``predict`` and ``profile``
take it and run it (bfloat16 parameters and activations, float32 master weights in the
checkpoint, no loss scale); ``NEONLITE_BF16=off`` refuses it in one line that says why, before
anything is written; ``-d f16`` on the CPU stays refused with its reason.  ``generate`` of a
bf16-trained checkpoint is in ``tests/api/model/test_bf16_training.py``."""
import numpy as np
import pytest
from support.harness import CHECKOUT, data_dir
from support.requires import need, requires

import neonlite
from benchmarks.image_folders import mnist_folder
from neonlite.cli import main
from neonlite.serialize import read_checkpoint

SHAPES = CHECKOUT / "examples" / "shapes_cnn.yaml"
IMAGE_FOLDER = CHECKOUT / "examples" / "image_folder_cnn.yaml"


@pytest.fixture(autouse=True)
def keep_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def one_error_line(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("neonlite: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["train", "profile"])
def test_f16_on_the_cpu_is_refused_with_its_reason(command, capsys, tmp_path):
    ckpt = tmp_path / "c.h5"
    argv = ["train", str(SHAPES), "-d", "f16", "--max-batches", "1", "-e", "1",
            "--save-path", str(ckpt)] if command == "train" else \
        ["profile", str(SHAPES), "-d", "f16", "--synthetic", "--steps", "1", "--warmup", "0"]
    assert main(argv) == 1
    line = one_error_line(capsys)
    assert line.startswith("neonlite: error: datatype: the cpu backend runs f32, f64 and bf16")
    assert "150 times slower" in line and "-d bf16" in line and "-b gpu" in line
    assert not ckpt.exists()


@pytest.mark.parametrize("command", ["train", "profile"])
def test_bf16_is_refused_in_one_line_when_turned_off(command, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NEONLITE_BF16", "off")
    ckpt = tmp_path / "c.h5"
    argv = ["train", str(SHAPES), "-d", "bf16", "--max-batches", "1", "-e", "1",
            "--save-path", str(ckpt), "-o", str(tmp_path / "log.h5")] \
        if command == "train" else \
        ["profile", str(SHAPES), "-d", "bf16", "--synthetic", "--steps", "1", "--warmup", "0"]
    assert main(argv) == 1
    line = one_error_line(capsys)
    assert line.startswith("neonlite: error: datatype: backend 'cpu' cannot run with datatype "
                           "'bf16'"), line
    assert "NEONLITE_BF16" in line, line
    assert list(tmp_path.iterdir()) == []


def test_bf16_trains_saves_masters_and_evaluates(capsys, tmp_path):
    ckpt = tmp_path / "c.h5"
    assert main(["train", str(SHAPES), "-d", "bf16", "--max-batches", "3", "-e", "1", "-q",
                 "--save-path", str(ckpt)]) == 0
    saved = read_checkpoint(str(ckpt))
    assert saved.config["datatype"] == "bf16"
    assert saved.optimizer_state["default"]["loss_scale"] == 1.0
    assert saved.states
    for name, keys in saved.states.items():
        master = keys["master"]
        assert master.dtype == np.float32, name
        bits = np.asarray(saved.params[name], np.float32).view(np.uint32)
        assert not np.any(bits & 0xFFFF), f"{name}: the saved weight is not a bf16 value"
        assert np.any(master.view(np.uint32) & 0xFFFF), f"{name}: the master is rounded"
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--max-batches", "2"]) == 0
    assert "(shapes valid, epoch 1)" in capsys.readouterr().out


def test_bf16_profile_reports_the_bf16_run(capsys):
    assert main(["profile", str(SHAPES), "-d", "bf16", "--synthetic", "--steps", "2",
                 "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("bf16, synthetic data"), out


@requires("mnist")
def test_bf16_image_classifier_predicts(capsys, tmp_path):
    mnist_folder(tmp_path / "digits", data_dir(), train=128, count=160)
    ckpt = tmp_path / "cnn.h5"
    assert main(["train", str(IMAGE_FOLDER), "--data-dir", str(tmp_path), "-d", "bf16", "-e",
                 "1", "--max-batches", "2", "-q", "--eval-freq", "0", "--save-path",
                 str(ckpt)]) == 0
    assert read_checkpoint(str(ckpt)).config["datatype"] == "bf16"
    sevens = sorted((tmp_path / "digits" / "valid" / "7").glob("*.png"))[:3]
    capsys.readouterr()
    assert main(["predict", str(ckpt), *map(str, sevens)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(str(p)) for line, p in zip(lines, sevens))


TINY_LM = """\
epochs: 1
batchsize: 4
rng_seed: 0
eval_freq: 0
vocab: &vocab auto
dataset: {type: text, config: {seq_len: 16, split: 0.9, nbatches: 2}}
layers:
  - {type: Embedding, config: {vocab: *vocab, d: 32}}
  - {type: PositionalEmbedding, config: {max_len: 16, d: 32}}
  - {type: TransformerBlock, config: {d_model: 32, heads: 2}}
  - {type: Affine, config: {nout: *vocab, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: Adam, config: {learning_rate: 0.001}}
"""


@pytest.mark.parametrize("path", ["storage", pytest.param("compute", marks=requires("bf16"))])
def test_doctor_names_the_path_the_training_products_take(path, tmp_path, monkeypatch):
    """``neonlite doctor``'s bf16 row and a ``-d bf16`` training step agree: bf16 arithmetic
    (the bf16 GEMM kernel) runs the step's products where the row says ``compute``, and
    never where it says ``storage``."""
    from neonlite.backends.cpu import bf16 as cpu_bf16
    from neonlite.doctor.bf16_row import bf16_row
    monkeypatch.setenv("NEONLITE_BF16", path)
    assert f"gemm {path} (" in bf16_row().found
    calls = []
    kernel = cpu_bf16.gemm_bf16
    monkeypatch.setattr(cpu_bf16, "gemm_bf16",
                        lambda *args, **kwargs: calls.append(1) or kernel(*args, **kwargs))
    config = tmp_path / "lm.yaml"
    config.write_text(TINY_LM)
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question. " * 20)
    assert main(["train", str(config), "--data", str(text), "-d", "bf16", "-q"]) == 0
    assert (len(calls) > 0) == (path == "compute"), f"{len(calls)} bf16 GEMM calls"


def test_bf16_trains_on_a_cpu_said_to_lack_the_bf16_instructions(tmp_path):
    """``NEONLITE_CPU_FEATURES_OFF`` simulates a CPU without AVX512-BF16 and AMX-BF16: even
    ``NEONLITE_BF16=compute`` then trains, on the storage path, and ``neonlite doctor``'s
    row says why."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, NEONLITE_CPU_FEATURES_OFF="avx512_bf16,amx_bf16",
               NEONLITE_BF16="compute")
    done = subprocess.run([sys.executable, "-m", "neonlite.cli", "train", str(SHAPES), "-d",
                           "bf16", "--max-batches", "2", "-e", "1", "-q", "--save-path",
                           str(tmp_path / "c.h5")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert read_checkpoint(str(tmp_path / "c.h5")).config["datatype"] == "bf16"
    doctor = subprocess.run([sys.executable, "-c", "from neonlite.doctor.bf16_row import "
                             "bf16_row; print(bf16_row().found)"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert "gemm storage" in doctor.stdout and "cannot be met" in doctor.stdout, doctor.stdout


@pytest.mark.parametrize("path,words", [
    ("storage", "bf16 (float32 products here: bf16 arithmetic is not faster on this CPU; "
                "neonlite doctor)"),
    ("compute", "bf16 (bf16 products here; neonlite doctor)")])
def test_the_run_line_says_which_arithmetic_bf16_products_use(capsys, monkeypatch, path, words):
    """A user who asks for -d bf16 sees whether this CPU gives it bf16 arithmetic or only bf16
    storage (where -d bf16 is slower than -d f32), before the first step."""
    if path == "compute":
        need("bf16")
    monkeypatch.setenv("NEONLITE_BF16", path)
    assert main(["train", str(SHAPES), "-d", "bf16", "--max-batches", "1", "-e", "1"]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if " parameters; " in x)
    assert f", {words}, " in line, line
