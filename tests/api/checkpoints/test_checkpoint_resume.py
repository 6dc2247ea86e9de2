"""--resume continues a run exactly: train 2 epochs, or train 1, save, resume for 1 — the final
parameters and optimizer state are bit-identical.  Also --model-file and neonlite eval."""
import numpy as np
import pytest

from neonlite.cli import main
from neonlite.serialize import read_checkpoint
from support.checks import assert_same_state

# Adam (per-parameter state and a step count), dropout (the device RNG), batch norm (running
# statistics, buffers), shuffling (the host RNG), a partial last batch (70 = 4 x 16 + 6).
RUN = """\
backend: cpu
epochs: 2
batchsize: 16
rng_seed: 7
dataset:
  type: shapes
  config: {n: 70, size: 8, classes: 4, seed: 3, nvalid: 20}
layers:
  - type: Conv
    config: {fshape: [3, 3, 4], padding: 1, batch_norm: true, activation: {type: Rectlin}}
  - type: Pooling
    config: {fshape: 2}
  - type: Dropout
    config: {keep: 0.7}
  - type: Affine
    config: {nout: 4, activation: {type: Softmax}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer:
  type: Adam
  config:
    learning_rate: 0.01
    schedule: {type: CosineSchedule, config: {total_steps: 12, warmup_steps: 2}}
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    return str(path)


def train(*args):
    assert main(["train", *map(str, args), "-q"]) == 0


def test_resume_is_bit_identical(config, tmp_path):
    train(config, "-e", 2, "--save-path", tmp_path / "straight.h5")
    train(config, "-e", 1, "--save-path", tmp_path / "half.h5")
    half = read_checkpoint(tmp_path / "half.h5")
    assert half.epoch_index == 1 and half.step_index == 5
    train(config, "-e", 2, "--resume", tmp_path / "half.h5", "--save-path",
          tmp_path / "resumed.h5")
    straight, resumed = read_checkpoint(tmp_path / "straight.h5"), \
        read_checkpoint(tmp_path / "resumed.h5")
    assert straight.epoch_index == 2 and straight.step_index == 10
    assert_same_state(straight, resumed)
    assert straight.states, "Adam's moments must be in the checkpoint"
    assert any(name.endswith("running_mean") for name in straight.params)


def test_resume_with_periodic_checkpoints(config, tmp_path):
    train(config, "-e", 2, "--save-path", tmp_path / "a.h5")
    train(config, "-e", 2, "--save-path", tmp_path / "b.h5", "--serialize", 1)
    assert_same_state(read_checkpoint(tmp_path / "a.h5"), read_checkpoint(tmp_path / "b.h5"))


def test_resume_refuses_a_different_network(config, tmp_path, capsys):
    train(config, "-e", 1, "--save-path", tmp_path / "half.h5")
    other = tmp_path / "other.yaml"
    other.write_text(RUN.replace("nout: 4", "nout: 4, batch_norm: true"))
    assert main(["train", str(other), "--resume", str(tmp_path / "half.h5"), "-q"]) == 1
    assert "was saved from a different network" in capsys.readouterr().err


def test_model_file_starts_from_the_weights(config, tmp_path):
    train(config, "-e", 1, "--save-path", tmp_path / "first.h5")
    train(config, "-e", 1, "--model-file", tmp_path / "first.h5", "--save-path",
          tmp_path / "second.h5", "--eval-freq", 0)
    first, second = read_checkpoint(tmp_path / "first.h5"), read_checkpoint(
        tmp_path / "second.h5")
    assert second.epoch_index == 1 and second.step_index == 5
    assert second.optimizer_state == {"default": {"step": 5}}
    assert any(not np.array_equal(first.params[k], second.params[k]) for k in first.params)


def test_eval_command_matches_training(config, tmp_path, capsys):
    assert main(["train", config, "--save-path", str(tmp_path / "c.h5"), "-o",
                 str(tmp_path / "log.h5"), "-q"]) == 0
    from neonlite.training_log import read_log
    trained = read_log(tmp_path / "log.h5")["epoch"]["metric"][-1]
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "c.h5")]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"misclassification: {trained:.4f} (shapes valid")
    assert main(["eval", str(tmp_path / "c.h5"), "--metric", "accuracy"]) == 0
    assert capsys.readouterr().out.startswith(f"accuracy: {1 - trained:.4f}")
    assert main(["eval", str(tmp_path / "c.h5"), "--metric", "topk", "--top-k", "4"]) == 0
    assert capsys.readouterr().out.startswith("top4_misclassification: 0.0000")
