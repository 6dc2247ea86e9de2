"""SIGINT and SIGTERM, sent by the test to a ``neonlite train`` subprocess in the middle of an
epoch: the step finishes, a resumable checkpoint is written through the usual save, one line
says where and how to resume, the exit status is 130 / 143; ``--resume`` from that checkpoint
finishes the run bit-exactly as an uninterrupted one (parameters and every batch's cost)."""
import shlex
import signal

import numpy as np
import pytest
from support.gated_run import neonlite


from neonlite.serialize import read_checkpoint
from neonlite.training_log import read_log

RUN = """\
epochs: 2
batchsize: 8
rng_seed: 4
dataset: {type: shapes, config: {n: 96, size: 8, classes: 4, nvalid: 16}}
layers:
  - {type: Conv, config: {fshape: [3, 3, 4], padding: 1, activation: {type: Rectlin}}}
  - {type: Dropout, config: {keep: 0.8}}
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: CrossEntropyMulti
optimizer: {type: Adam, config: {learning_rate: 0.01}}
"""
BATCHES = 12


def train(tmp_path, stop, *flags, send=None):
    return neonlite(tmp_path, stop, "train", tmp_path / "run.yaml", *flags, send=send)


@pytest.fixture
def full_run(tmp_path):
    (tmp_path / "run.yaml").write_text(RUN)
    status, err = train(tmp_path, 0, "-o", tmp_path / "full.h5", "--save-path",
                        tmp_path / "full_ckpt.h5")
    assert status == 0, err
    return read_checkpoint(tmp_path / "full_ckpt.h5"), read_log(tmp_path / "full.h5")


@pytest.mark.parametrize("sig,stop", [(signal.SIGINT, 5), (signal.SIGTERM, BATCHES + 3)])
def test_signal_writes_a_checkpoint_that_resumes_bit_exactly(tmp_path, full_run, sig, stop):
    full, full_log = full_run
    ckpt, log = tmp_path / "c.h5", tmp_path / "log.h5"
    status, err = train(tmp_path, stop, "-o", log, "--save-path", ckpt, send=sig)
    assert status == 128 + sig, err
    epoch, batch = divmod(stop, BATCHES)
    line = f"interrupted at epoch {epoch + 1}, batch {batch}; resume with: neonlite train " \
        f"--resume {ckpt} -o {log}"
    assert err.splitlines()[-1] == line, err
    assert read_log(log)["interrupted"]
    saved = read_checkpoint(ckpt)
    assert (saved.epoch_index, saved.batch_index, saved.step_index) == (epoch, batch, stop)

    status, err = train(tmp_path, 0, "-o", log, "--save-path", ckpt, "--resume", ckpt)
    assert status == 0, err
    resumed, resumed_log = read_checkpoint(ckpt), read_log(log)
    assert resumed.step_index == full.step_index == 2 * BATCHES
    for name, value in full.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)
    np.testing.assert_array_equal(resumed_log["batch"]["cost"], full_log["batch"]["cost"])
    np.testing.assert_array_equal(resumed_log["epoch"]["train_cost"],
                                  full_log["epoch"]["train_cost"])
    assert resumed_log["complete"] and not resumed_log["interrupted"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_printed_resume_command_alone_finishes_the_run(tmp_path, full_run, sig):
    """``neonlite train --resume CKPT`` as printed: no YAML, no --save-path; the checkpoint
    holds the run and the resumed run saves where the interrupted one did."""
    full, _ = full_run
    ckpt = tmp_path / "c.h5"
    status, err = train(tmp_path, 5, "--save-path", ckpt, send=sig)
    assert status == 128 + sig, err
    command = shlex.split(err.splitlines()[-1].split("; resume with: ", 1)[1])
    assert command == ["neonlite", "train", "--resume", str(ckpt)]
    (tmp_path / "elsewhere").mkdir()
    status, err = neonlite(tmp_path / "elsewhere", 0, *command[1:])
    assert status == 0, err
    resumed = read_checkpoint(ckpt)
    assert (resumed.epoch_index, resumed.step_index) == (2, full.step_index)
    for name, value in full.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)


def test_a_resumed_run_with_its_yaml_saves_where_the_interrupted_one_did(tmp_path, full_run):
    full, _ = full_run
    ckpt = tmp_path / "c.h5"
    status, err = train(tmp_path, 5, "--save-path", ckpt, send=signal.SIGTERM)
    assert status == 143, err
    status, err = train(tmp_path, 0, "--resume", ckpt)
    assert status == 0, err
    assert read_checkpoint(ckpt).step_index == full.step_index


def test_train_without_yaml_or_resume_is_one_error(tmp_path):
    status, err = neonlite(tmp_path, 0, "train")
    assert status == 1
    assert err.strip().splitlines() == ["neonlite: error: train: give the run's FILE.yaml, or "
                                        "--resume CKPT.h5 to continue the run a checkpoint "
                                        "holds"]


def test_without_save_path_the_line_says_no_checkpoint(tmp_path):
    (tmp_path / "run.yaml").write_text(RUN)
    status, err = train(tmp_path, 3, send=signal.SIGTERM)
    assert status == 143, err
    assert err.splitlines()[-1].startswith("interrupted at epoch 1, batch 3; no checkpoint")


def test_the_bar_clears_its_line_before_the_interrupt_line():
    """On a terminal the line after an interrupt starts clean: the bar's line is cleared."""
    import io

    from neonlite.callbacks import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    class Model:
        class be:
            bsz = 4
        last_eval = None

    bar = ProgressBar(Terminal(), refresh=0.0)
    bar.model = Model()
    bar.on_train_begin(range(10), 1)
    bar.on_epoch_begin(0)
    for batch in range(3):
        bar.on_minibatch_end(0, batch, 1.0)
    assert "3/10" in bar.stream.getvalue()
    bar.on_train_interrupted(0, 3)
    assert bar.stream.getvalue().rsplit("\r", 1)[1].strip() == ""


AUGMENTED = RUN.replace(
    "dataset: {type: shapes, config: {n: 96, size: 8, classes: 4, nvalid: 16}}",
    "dataset: {type: shapes, config: {n: 96, size: 8, classes: 4, nvalid: 16, augment: "
    "[{type: pad_crop, config: {size: 8, pad: 2}}, flip, {type: color_jitter, config: "
    "{brightness: 0.3, contrast: 0.3, saturation: 0.3}}, {type: normalize, config: "
    "{mean: 0.5, std: 0.25}}]}}")


def test_an_augmented_run_resumes_bit_exactly_in_the_middle_of_an_epoch(tmp_path):
    """The augmented stream continues: SIGTERM in the middle of epoch 2, then --resume, gives
    the parameters and batch costs of the uninterrupted augmented run."""
    assert AUGMENTED != RUN
    (tmp_path / "run.yaml").write_text(AUGMENTED)
    status, err = train(tmp_path, 0, "-o", tmp_path / "full.h5", "--save-path",
                        tmp_path / "full_ckpt.h5")
    assert status == 0, err
    full, full_log = read_checkpoint(tmp_path / "full_ckpt.h5"), read_log(tmp_path / "full.h5")
    ckpt, log = tmp_path / "c.h5", tmp_path / "log.h5"
    status, err = train(tmp_path, BATCHES + 5, "-o", log, "--save-path", ckpt,
                        send=signal.SIGTERM)
    assert status == 143, err
    status, err = train(tmp_path, 0, "-o", log, "--save-path", ckpt, "--resume", ckpt)
    assert status == 0, err
    resumed, resumed_log = read_checkpoint(ckpt), read_log(log)
    for name, value in full.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)
    np.testing.assert_array_equal(resumed_log["batch"]["cost"], full_log["batch"]["cost"])
