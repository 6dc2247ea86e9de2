"""A run on bucketed sequence batches (the ``sequences`` data set), stopped by SIGTERM in the
middle of an epoch and resumed with ``--resume``, finishes bit-exactly as the uninterrupted
run: the epoch's bucket order comes back from the host RNG state the checkpoint records, and
the batches already trained are skipped without being made."""
import signal

import numpy as np
from support.gated_run import neonlite

from neonlite.serialize import read_checkpoint
from neonlite.training_log import read_log

PLAY = "".join(f"{who}:\n{line * (1 + i % 5)}\n\n" for i, (who, line) in enumerate([
    ("ANNA", "Good morrow, sir. "), ("BEN", "And to you. "), ("CLEO", "Hence, away! ")] * 12))
RUN = """\
epochs: 2
batchsize: 4
rng_seed: 7
dataset: {type: sequences, config: {filename: play.txt, max_len: 96, multiple_of: 8,
                                     valid_every: 4}}
layers:
  - {type: Embedding, config: {vocab: auto, d: 8}}
  - {type: LSTM, config: {nout: 16}}
  - {type: Affine, config: {nout: auto, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti,
                                                  config: {ignore_index: -100}}}}
optimizer: {type: Adam, config: {learning_rate: 0.01}}
"""
BATCHES = 7  # 27 training speeches in batches of 4


def test_sigterm_mid_epoch_then_resume_equals_the_whole_run(tmp_path):
    (tmp_path / "play.txt").write_text(PLAY)
    (tmp_path / "run.yaml").write_text(RUN)
    status, err = neonlite(tmp_path, 0, "train", "run.yaml", "-o", "full.h5", "--save-path",
                           "full_ckpt.h5")
    assert status == 0, err
    full, full_log = read_checkpoint(tmp_path / "full_ckpt.h5"), read_log(tmp_path / "full.h5")
    assert full.step_index == 2 * BATCHES
    stop = BATCHES + 3
    status, err = neonlite(tmp_path, stop, "train", "run.yaml", "-o", "log.h5", "--save-path",
                           "c.h5", send=signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, err
    saved = read_checkpoint(tmp_path / "c.h5")
    assert (saved.epoch_index, saved.batch_index) == (1, 3)
    status, err = neonlite(tmp_path, 0, "train", "run.yaml", "-o", "log.h5", "--save-path",
                           "c.h5", "--resume", "c.h5")
    assert status == 0, err
    resumed, resumed_log = read_checkpoint(tmp_path / "c.h5"), read_log(tmp_path / "log.h5")
    for name, value in full.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)
    np.testing.assert_array_equal(resumed_log["batch"]["cost"], full_log["batch"]["cost"])
