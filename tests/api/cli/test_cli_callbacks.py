"""Callbacks: checkpoint every N epochs and keep-best, early stopping, learning-rate schedule,
user hooks; and the same callbacks named in a YAML run."""
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.callbacks import (Callback, Callbacks, EarlyStopping, FunctionCallback,
                                LearningRateSchedule, ModelCheckpoint)
from neonlite.cli import main
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum, MultiOptimizer, StepSchedule
from neonlite.serialize import read_checkpoint
from neonlite.transforms import CrossEntropyMulti, Softmax


class ScriptedEval(Callback):
    """Stands in for Evaluation: reports the given metric values, one per epoch."""

    def __init__(self, values, name="misclassification"):
        self.values, self.name = values, name

    def on_epoch_end(self, epoch):
        self.model.last_eval = (self.name, self.values[epoch], epoch)


def fit(epochs, *callbacks, optimizer=None):
    neonlite.gen_backend("cpu", batch_size=10, rng_seed=0)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(20, 3)), rng.integers(0, 2, 20), nclass=2)
    model = Model([Affine(2, activation=Softmax(), name="out")])
    cbs = Callbacks(model, progress=False)
    for cb in callbacks:
        cbs.add(cb)
    model.fit(data, optimizer or GradientDescentMomentum(0.1), epochs,
              GeneralizedCost(CrossEntropyMulti()), cbs)
    return model


def test_early_stopping_after_patience_evaluations(capsys):
    stopper = EarlyStopping(patience=2)
    model = fit(10, ScriptedEval([0.5, 0.4, 0.45, 0.41, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1]), stopper)
    assert model.epoch_index == 4 and stopper.stopped_epoch == 3
    assert capsys.readouterr().err.strip() == (
        "early stopping after epoch 4: misclassification has not improved on 0.4000 (epoch 2) "
        "for 2 evaluations")


def test_early_stopping_on_accuracy_wants_it_higher():
    stopper = EarlyStopping(patience=1, min_delta=0.05)
    model = fit(5, ScriptedEval([0.5, 0.6, 0.62, 0.9, 0.9], name="accuracy"), stopper)
    assert model.epoch_index == 3


def test_checkpoint_every_n_epochs_and_at_the_end(tmp_path):
    saves = []
    checkpoint = ModelCheckpoint(tmp_path / "c.h5", every=2)
    original = checkpoint._save
    checkpoint._save = lambda path: (saves.append((path, checkpoint.model.epoch_index)),
                                     original(path))
    fit(5, checkpoint)
    assert saves == [(str(tmp_path / "c.h5"), 2), (str(tmp_path / "c.h5"), 4),
                     (str(tmp_path / "c.h5"), 5)]
    assert read_checkpoint(tmp_path / "c.h5").epoch_index == 5


def test_keep_best_saves_when_the_metric_improves(tmp_path):
    epochs = []
    checkpoint = ModelCheckpoint(tmp_path / "c.h5", every=0, keep_best=True)
    original = checkpoint._save
    checkpoint._save = lambda path: (epochs.append((path, checkpoint.model.epoch_index)),
                                     original(path))
    fit(4, ScriptedEval([0.5, 0.3, 0.4, 0.35]), checkpoint)
    best = str(tmp_path / "c.best.h5")
    assert epochs == [(best, 1), (best, 2), (str(tmp_path / "c.h5"), 4)]
    assert read_checkpoint(best).epoch_index == 2


def test_learning_rate_schedule_sets_each_epoch_and_restores():
    seen = []
    optimizer = GradientDescentMomentum(0.1)
    hook = FunctionCallback(on_minibatch_end=lambda e, b, c: seen.append(
        (e, optimizer.learning_rate)))
    fit(3, LearningRateSchedule(StepSchedule([1, 2], 0.5)), hook, optimizer=optimizer)
    assert seen == [(0, 0.1), (0, 0.1), (1, 0.05), (1, 0.05), (2, 0.025), (2, 0.025)]
    assert optimizer.learning_rate == 0.1


def test_learning_rate_schedule_reaches_every_optimizer_of_a_multioptimizer():
    a, b = GradientDescentMomentum(0.1), GradientDescentMomentum(0.2)
    rates = []
    hook = FunctionCallback(on_epoch_begin=lambda e: rates.append((a.learning_rate,
                                                                   b.learning_rate)))
    fit(2, LearningRateSchedule(StepSchedule(1, 0.1)), hook,
        optimizer=MultiOptimizer({"default": a, "Bias": b}))
    assert rates[1] == pytest.approx((0.01, 0.02))


def test_function_callback_runs_every_hook():
    calls = []
    hooks = {name: (lambda name: lambda *args: calls.append(name))(name)
             for name in FunctionCallback.HOOKS}
    fit(1, FunctionCallback(**hooks))
    assert calls == ["on_train_begin", "on_epoch_begin", "on_minibatch_end",
                     "on_minibatch_end", "on_epoch_end", "on_train_end"]
    with pytest.raises(TypeError, match="unknown hook 'on_batch'"):
        FunctionCallback(on_batch=print)


def test_bad_callback_options_are_errors():
    with pytest.raises(ValueError, match="patience must be a positive integer"):
        EarlyStopping(patience=0)
    with pytest.raises(ValueError, match="mode must be 'auto', 'min' or 'max'"):
        EarlyStopping(mode="up")
    with pytest.raises(ValueError, match="every must be an integer >= 0"):
        ModelCheckpoint("x.h5", every=-1)


YAML = """\
epochs: 6
batchsize: 16
rng_seed: 0
dataset: {type: shapes, config: {n: 32, size: 8, classes: 4, nvalid: 16}}
layers:
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: CrossEntropyMulti
optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.0000001}}
callbacks:
  - {type: EarlyStopping, config: {patience: 1, min_delta: 0.5}}
  - {type: ModelCheckpoint, config: {save_path: SAVE, every: 1, keep_best: true}}
  - type: LearningRateSchedule
    config:
      schedule: {type: StepSchedule, config: {step_config: 1, change: 0.5}}
"""


def test_callbacks_named_in_yaml(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(YAML.replace("SAVE", str(tmp_path / "c.h5")))
    assert main(["train", str(config), "-o", str(tmp_path / "log.h5")]) == 0
    err = capsys.readouterr().err
    assert "early stopping after epoch 2: misclassification has not improved" in err
    assert read_checkpoint(tmp_path / "c.h5").epoch_index == 2
    best = read_checkpoint(tmp_path / "c.best.h5")
    assert best.epoch_index == 1
    assert best.config["callbacks"][2]["type"] == "LearningRateSchedule"


def test_yaml_callback_errors_have_key_paths(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(YAML.replace("patience: 1,", "patience: 0,").replace("SAVE", "c.h5"))
    assert main(["train", str(config)]) == 1
    assert capsys.readouterr().err.strip() == (
        "neonlite: error: callbacks[0].config.patience: EarlyStopping: patience must be a "
        "positive integer, got 0")


def test_loss_log_keeps_every_cost_and_prints_each_window_mean():
    import io
    from neonlite.callbacks import LossLog
    out = io.StringIO()
    log = LossLog(every=2, stream=out, unit="nats")
    for batch, cost in enumerate([4.0, 2.0, 1.0, 3.0, 9.0]):
        log.on_minibatch_end(0, batch, cost)
    assert log.losses == [4.0, 2.0, 1.0, 3.0, 9.0]
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["2", "4"]
    assert "3.0000 nats" in lines[0] and "2.0000 nats" in lines[1]
    with pytest.raises(ValueError, match="every must be >= 1"):
        LossLog(every=0)
