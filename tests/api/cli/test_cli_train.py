"""``neonlite train``: its output on and off a terminal, flags over the YAML, ``--max-batches``
and the training log it writes (``-o``), read during the run and continued by ``--resume``."""
import io
import re

import numpy as np
import pytest
from support.shapes_run import shapes_run

from neonlite.cli import main
from neonlite.serialize import read_checkpoint
from neonlite.training_log import read_log


@pytest.fixture
def config(tmp_path):
    return shapes_run(tmp_path)


def test_plain_output_when_not_a_terminal(config, capsys):
    assert main(["train", config]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{config}: 372 parameters; shapes (8, 8, 3), 64 train / 32 valid;"
                             f" backend cpu, batch 16, f32, epochs 1..2")
    assert err[1].startswith("epoch 1/2: mean train cost ")
    assert ", valid misclassification " in err[1] and err[1].endswith(" samples/s)")
    assert err[2].startswith("epoch 2/2: mean train cost ")
    assert err[3].startswith("done: 2 epochs in ")
    assert len(err) == 4
    assert "\r" not in "".join(err)


def test_quiet_prints_nothing(config, capsys):
    assert main(["train", config, "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_flags_override_the_yaml(config, tmp_path, capsys):
    ckpt = tmp_path / "c.h5"
    assert main(["train", config, "-e", "1", "-z", "8", "-r", "5", "-d", "f64", "--eval-freq",
                 "0", "--save-path", str(ckpt)]) == 0
    err = capsys.readouterr().err
    assert "batch 8, f64, epochs 1..1" in err and "misclassification" not in err
    saved = read_checkpoint(ckpt)
    assert saved.epoch_index == 1 and saved.step_index == 8
    assert (saved.config["batchsize"], saved.config["rng_seed"], saved.config["datatype"],
            saved.config["eval_freq"], saved.config["epochs"]) == (8, 5, "f64", 0, 1)
    assert all(v.dtype == np.float64 for v in saved.params.values())


def test_max_batches_limits_each_epoch(config, tmp_path):
    log = tmp_path / "log.h5"
    assert main(["train", config, "--max-batches", "2", "-o", str(log), "-q"]) == 0
    assert read_log(log)["batch"]["epoch"].tolist() == [0, 0, 1, 1]


def test_training_log_contents(config, tmp_path):
    log = tmp_path / "log.h5"
    assert main(["train", config, "-o", str(log), "-q"]) == 0
    data = read_log(log)
    assert data["complete"] and data["metric"] == "misclassification"
    assert data["batch"]["epoch"].tolist() == [0] * 4 + [1] * 4
    assert np.all(np.isfinite(data["batch"]["cost"]))
    assert np.all(np.diff(data["batch"]["time"]) >= 0)
    assert data["epoch"]["index"].tolist() == [0, 1]
    np.testing.assert_allclose(data["epoch"]["train_cost"],
                               [data["batch"]["cost"][:4].mean(), data["batch"]["cost"][4:].mean()])
    assert np.all((data["epoch"]["metric"] >= 0) & (data["epoch"]["metric"] <= 1))
    assert np.all(data["epoch"]["seconds"] > 0)
    assert "layers:" in data["config"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_training_log_is_readable_during_the_run(tmp_path):
    """A reader opening the log between epochs (while training goes on) sees the finished
    epochs."""
    import neonlite
    from neonlite import Model
    from neonlite.callbacks import Callbacks, FunctionCallback
    from neonlite.data import ArrayIterator
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.training_log import TrainingLog
    from neonlite.transforms import CrossEntropyMulti, Softmax

    neonlite.gen_backend("cpu", batch_size=10, rng_seed=0)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(30, 4)), rng.integers(0, 2, 30), nclass=2)
    model = Model([Affine(2, activation=Softmax())])
    path = tmp_path / "log.h5"
    seen = []
    callbacks = Callbacks(model, eval_set=data, progress=False)
    callbacks.add(TrainingLog(path, flush_interval=0.0))
    callbacks.add(FunctionCallback(on_minibatch_end=lambda e, b, c: seen.append(read_log(path))))
    model.fit(data, GradientDescentMomentum(0.1), 2, GeneralizedCost(CrossEntropyMulti()),
              callbacks)
    assert [len(log["batch"]["cost"]) for log in seen] == [1, 2, 3, 4, 5, 6]
    assert [len(log["epoch"]["index"]) for log in seen] == [0, 0, 0, 1, 1, 1]
    assert not seen[-1]["complete"] and read_log(path)["complete"]


def test_resumed_run_continues_its_log(config, tmp_path):
    log, ckpt = tmp_path / "log.h5", tmp_path / "c.h5"
    assert main(["train", config, "-e", "1", "-o", str(log), "--save-path", str(ckpt),
                 "-q"]) == 0
    first = read_log(log)
    assert main(["train", config, "-e", "2", "-o", str(log), "--resume", str(ckpt), "-q"]) == 0
    both = read_log(log)
    assert both["batch"]["epoch"].tolist() == [0] * 4 + [1] * 4
    np.testing.assert_array_equal(both["batch"]["cost"][:4], first["batch"]["cost"])
    assert both["epoch"]["time"][1] > both["epoch"]["time"][0]


def test_progress_bar_on_a_terminal(config):
    from neonlite.callbacks import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    stream = Terminal()
    _fit_with(ProgressBar(stream, refresh=0.0))
    text = stream.getvalue()
    assert "epoch 1/2" in text and "3/3" in text
    assert "cost=" in text and "samples_s=" in text
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", text), "elapsed<ETA"
    assert "\r" in text, "a terminal gets a redrawn bar"
    assert "epoch 2/2: mean train cost" in text


def test_progress_lines_off_a_terminal():
    from neonlite.callbacks import ProgressBar
    stream = io.StringIO()
    _fit_with(ProgressBar(stream, interval=0.0))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("epoch 1/2: batch 1/3, running cost ") and " ETA " in lines[0]
    assert lines[3].startswith("epoch 1/2: mean train cost ")
    assert "\r" not in stream.getvalue()


def _fit_with(callback):
    import neonlite
    from neonlite import Model
    from neonlite.callbacks import Callbacks
    from neonlite.data import ArrayIterator
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.transforms import CrossEntropyMulti, Softmax

    neonlite.gen_backend("cpu", batch_size=10, rng_seed=0)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(30, 4)), rng.integers(0, 2, 30), nclass=2)
    model = Model([Affine(2, activation=Softmax())])
    callbacks = Callbacks(model, progress=False)
    callbacks.add(callback)
    model.fit(data, GradientDescentMomentum(0.1), 2, GeneralizedCost(CrossEntropyMulti()),
              callbacks)
