"""--resume is bit-exact for a stateful LSTM (truncated backpropagation through time): the
state the LSTMs carry from one minibatch to the next is saved in the checkpoint and restored,
so a run stopped inside an epoch (a signal) or at an epoch boundary (without ``ResetState``)
and resumed ends with the same parameters, optimizer state and carried state as an
uninterrupted run.  A checkpoint without the carried state (older files) still loads."""
import os
import signal

import h5py
import numpy as np
import pytest

from neonlite.callbacks import FunctionCallback
from neonlite.cli import main
from neonlite.config.run import RunConfig
from neonlite.serialize import CheckpointError, read_checkpoint

# a small char_lstm: 2 stacked stateful LSTMs over streams of Python's documentation text
RUN = """\
backend: cpu
epochs: 2
batchsize: 4
rng_seed: 3
eval_freq: 0
vocab: &vocab 103
dataset:
  type: text
  config: {seq_len: 8, split: 0.9, nbatches: 5, streams: true}
layers:
  - {type: Embedding, config: {vocab: *vocab, d: 8, name: embed}}
  - {type: LSTM, config: {nout: 12, forget_bias: 1.0, stateful: true, name: lstm0}}
  - {type: LSTM, config: {nout: 12, stateful: true, name: lstm1}}
  - {type: Affine, config: {nout: *vocab, activation: {type: Softmax}, name: head}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: Adam, config: {learning_rate: 0.01, gradient_clip_norm: 5.0}}
"""
RESET = "callbacks:\n  - {type: ResetState}\n"
BATCHES = 5


def write_run(tmp_path, reset):
    path = tmp_path / "run.yaml"
    path.write_text(RUN + (RESET if reset else ""))
    return str(path)


def train(config, *flags):
    return main(["train", config, "-q", *map(str, flags)])


def stop_after(monkeypatch, steps):
    """The next ``neonlite train`` gets SIGTERM after its ``steps``-th step (it finishes the
    step, writes its checkpoint and returns 143)."""
    build, count = RunConfig.build_callbacks, [0]

    def step(epoch, batch, cost):
        count[0] += 1
        if count[0] == steps:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(RunConfig, "build_callbacks",
                        lambda self: build(self) + [FunctionCallback(on_minibatch_end=step)])


def assert_same(a, b):
    assert list(a.params) == list(b.params)
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
    for name in a.states:
        for key in a.states[name]:
            np.testing.assert_array_equal(a.states[name][key], b.states[name][key],
                                          err_msg=f"{name}/{key}")
    assert a.layer_states.keys() == b.layer_states.keys()
    for name in a.layer_states:
        np.testing.assert_array_equal(a.layer_states[name], b.layer_states[name], err_msg=name)
    assert (a.epoch_index, a.step_index) == (b.epoch_index, b.step_index)


def test_resume_inside_an_epoch_is_bit_exact(tmp_path, monkeypatch):
    config = write_run(tmp_path, reset=True)
    assert train(config, "--save-path", tmp_path / "straight.h5") == 0
    with monkeypatch.context() as patch:
        stop_after(patch, BATCHES + 2)
        assert train(config, "--save-path", tmp_path / "cut.h5") == 128 + signal.SIGTERM
    cut = read_checkpoint(tmp_path / "cut.h5")
    assert (cut.epoch_index, cut.batch_index) == (1, 2)
    assert sorted(cut.layer_states) == ["lstm0.c", "lstm0.h", "lstm1.c", "lstm1.h"]
    assert cut.layer_states["lstm0.h"].shape == (4, 12)
    assert np.abs(cut.layer_states["lstm1.c"]).max() > 0
    assert train(config, "--resume", tmp_path / "cut.h5", "--save-path",
                 tmp_path / "resumed.h5") == 0
    assert_same(read_checkpoint(tmp_path / "straight.h5"),
                read_checkpoint(tmp_path / "resumed.h5"))


def test_resume_at_an_epoch_boundary_keeps_the_carried_state(tmp_path):
    """Without ResetState the state carries from one epoch into the next."""
    config = write_run(tmp_path, reset=False)
    assert train(config, "--save-path", tmp_path / "straight.h5") == 0
    assert train(config, "-e", 1, "--save-path", tmp_path / "half.h5") == 0
    assert train(config, "--resume", tmp_path / "half.h5", "--save-path",
                 tmp_path / "resumed.h5") == 0
    assert_same(read_checkpoint(tmp_path / "straight.h5"),
                read_checkpoint(tmp_path / "resumed.h5"))


def test_a_checkpoint_without_carried_state_still_resumes(tmp_path):
    """Files written before the carried state was saved: the state starts from the initial
    state, as it did then."""
    config = write_run(tmp_path, reset=True)
    assert train(config, "-e", 1, "--save-path", tmp_path / "half.h5") == 0
    with h5py.File(tmp_path / "half.h5", "a") as f:
        del f["layer_states"]
    assert read_checkpoint(tmp_path / "half.h5").layer_states == {}
    assert train(config, "--resume", tmp_path / "half.h5", "--save-path",
                 tmp_path / "resumed.h5") == 0
    assert train(config, "--save-path", tmp_path / "straight.h5") == 0
    assert_same(read_checkpoint(tmp_path / "straight.h5"),
                read_checkpoint(tmp_path / "resumed.h5"))


@pytest.mark.parametrize("damage, words", [
    (lambda g: g.create_dataset("lstm0.x", data=np.zeros((4, 12), np.float32)),
     "/layer_states/lstm0.x: no crc32 checksum"),
    (lambda g: g["lstm0.h"].attrs.__setitem__("crc32", np.uint32(1)),
     "/layer_states/lstm0.h: checksum mismatch"),
])
def test_damaged_carried_state_is_refused(tmp_path, damage, words):
    config = write_run(tmp_path, reset=True)
    assert train(config, "-e", 1, "--save-path", tmp_path / "c.h5") == 0
    with h5py.File(tmp_path / "c.h5", "a") as f:
        damage(f["layer_states"])
    with pytest.raises(CheckpointError, match=words):
        read_checkpoint(tmp_path / "c.h5")


def test_carried_state_of_another_shape_does_not_resume(tmp_path, capsys):
    config = write_run(tmp_path, reset=True)
    assert train(config, "-e", 1, "--save-path", tmp_path / "c.h5") == 0
    assert train(config, "-e", 2, "-z", 2, "--resume", tmp_path / "c.h5") == 1
    err = capsys.readouterr().err
    assert "lstm0.c" in err and "(4, 12)" in err and "(2, 12)" in err, err
