"""The training log is appended each epoch, not rewritten whole: the file stays the same file
(one inode for the run), a write costs the new rows only (the ms per epoch at epoch 8,000 is
about that at epoch 100, where rewriting grew with the run), a reader opens it at any moment
and a run killed with SIGKILL leaves a readable log of the epochs before the kill.

The timing drives :class:`~neonlite.training_log.TrainingLog` alone (no model), in its own
process, and compares two windows of the same run, so a loaded machine slows both alike;
``PYTHONPATH=tests python tests/api/checkpoints/test_training_log_append.py LOG.h5`` prints
the figures (8,000 epochs of 4 batches and 2,000 of 50), for a run on an idle machine."""
import os
import signal
import sys
import time

from support.isolated import python_argv, run_isolated

from neonlite.training_log import TrainingLog, read_log

#: drive a TrainingLog through EPOCHS epochs of BATCHES batches; print the mean ms per epoch
#: (the log's own hooks) over epochs 90-110 and over the last 20
TIMING = """
import sys, time
import numpy as np
from neonlite.training_log import TrainingLog

class Model:
    epoch_index = 0
    batch_index = 0
    last_eval = None

epochs, batches = int(sys.argv[2]), int(sys.argv[3])
log = TrainingLog(sys.argv[1], flush_interval=1e9)
log.model = Model()
log.on_train_begin(None, epochs)
spent = []
for epoch in range(epochs):
    begin = time.perf_counter()
    log.on_epoch_begin(epoch)
    for batch in range(batches):
        log.on_minibatch_end(epoch, batch, 1.0 / (1 + epoch))
    log.model.last_eval = ("misclassification", 0.5, epoch)
    log.on_epoch_end(epoch)
    spent.append(time.perf_counter() - begin)
log.on_train_end()
early = 1e3 * float(np.mean(spent[90:110]))
late = 1e3 * float(np.mean(spent[-20:]))
print(f"{early:.3f} {late:.3f}")
"""


class _Model:
    epoch_index = 0
    batch_index = 0
    last_eval = None


def test_each_epoch_appends_to_the_same_file(tmp_path):
    path = tmp_path / "log.h5"
    log = TrainingLog(path, flush_interval=1e9)
    log.model = _Model()
    log.on_train_begin(None, 5)
    inodes = []
    for epoch in range(5):
        log.on_epoch_begin(epoch)
        for batch in range(3):
            log.on_minibatch_end(epoch, batch, float(epoch + batch))
        log.on_epoch_end(epoch)
        inodes.append(os.stat(path).st_ino)
        seen = read_log(path)
        assert len(seen["epoch"]["index"]) == epoch + 1 and not seen["complete"]
        assert list(seen["batch"]["cost"][-3:]) == [epoch, epoch + 1, epoch + 2]
    log.on_train_end()
    assert len(set(inodes)) == 1, "the log was replaced, not appended to"
    done = read_log(path)
    assert done["complete"] and len(done["batch"]["cost"]) == 15
    assert [p for p in os.listdir(tmp_path) if p != "log.h5"] == []


KILLED = """
import os, signal, sys
from neonlite.callbacks import FunctionCallback
from neonlite.cli import main
from neonlite.config.run import RunConfig
build = RunConfig.build_callbacks
def kill(epoch):
    if epoch == 3:
        os.kill(os.getpid(), signal.SIGKILL)
RunConfig.build_callbacks = lambda self: build(self) + [FunctionCallback(on_epoch_end=kill)]
sys.exit(main(sys.argv[1:]))
"""

RUN = """\
epochs: 6
batchsize: 8
rng_seed: 0
dataset: {type: shapes, config: {n: 16, size: 8, classes: 4, nvalid: 8}}
layers:
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: CrossEntropyMulti
optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.1}}
"""


def test_a_run_killed_mid_way_leaves_a_readable_log(tmp_path):
    (tmp_path / "run.yaml").write_text(RUN)
    run = run_isolated(python_argv(KILLED) + ["train", "run.yaml", "-q", "-o", "log.h5"],
                       cwd=tmp_path)
    assert run.status == -signal.SIGKILL, run.stderr
    log = read_log(tmp_path / "log.h5")
    assert list(log["epoch"]["index"]) == [0, 1, 2] and not log["complete"]
    assert len(log["batch"]["cost"]) >= 6


def test_late_epochs_cost_what_early_ones_do(tmp_path):
    """2,000 epochs of 50 batches: rewriting the log made the last epochs 8.6 times as slow
    as epoch 100 (4.9 -> 42.4 ms on a loaded machine); appending keeps them level."""
    result = run_isolated(python_argv(TIMING) + [str(tmp_path / "log.h5"), "2000", "50"],
                          seconds=600, memory_mib=1536)
    assert result.status == 0, result.stderr
    early, late = map(float, result.stdout.split())
    (tmp_path / "timing.txt").write_text(f"ms per epoch: epochs 90-110 {early}, "
                                         f"last 20 of 2000 {late}\n")
    assert late < 2 * early + 1.0, (early, late)


if __name__ == "__main__":
    for epochs, batches in (("8000", "4"), ("2000", "50")):
        begin = time.perf_counter()
        out = run_isolated(python_argv(TIMING) + [sys.argv[1], epochs, batches], seconds=3600)
        print(f"{epochs} epochs of {batches} batches: ms per epoch at epochs 90-110, at the "
              f"last 20:", out.stdout.strip() or out.stderr,
              f"({time.perf_counter() - begin:.0f} s)")
