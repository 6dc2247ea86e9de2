"""``neonlite plot``: it writes a PNG of a training log, says how to get matplotlib where it is
missing and refuses a checkpoint; each epoch's mean cost sits at the middle of its epoch, epochs
are integer ticks, and the title says "(in progress)" only while a run goes on ("(ended early)"
when a signal stopped it)."""
import sys

import h5py
import numpy as np
import pytest
from support.shapes_run import shapes_run

import neonlite
from neonlite.cli import main
from neonlite.cli.plot import draw
from neonlite.training_log import LogError, read_log

RUN = """\
epochs: 3
batchsize: 16
rng_seed: 0
dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, nvalid: 32}}
layers:
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: CrossEntropyMulti
optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.1}}
"""


@pytest.fixture(scope="module")
def plt():
    matplotlib = pytest.importorskip("matplotlib", reason="neonlite plot needs matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    return pyplot


@pytest.fixture(scope="module")
def log_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    (root / "run.yaml").write_text(RUN)
    previous = neonlite.backends._current
    assert main(["train", str(root / "run.yaml"), "-q", "-o", str(root / "log.h5")]) == 0
    neonlite.backends._current = previous
    return root / "log.h5"


def test_epoch_means_at_the_epoch_centres_and_integer_ticks(plt, log_path):
    log = read_log(log_path)
    figure = draw(plt, log, "log.h5")
    left, right = figure.axes
    mean = next(line for line in left.get_lines() if line.get_label() == "epoch mean")
    np.testing.assert_array_equal(mean.get_xdata(), [0.5, 1.5, 2.5])
    figure.canvas.draw()
    for axes in (left, right):
        ticks = [t for t in axes.get_xticks() if axes.get_xlim()[0] <= t <= axes.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert figure._suptitle.get_text() == "log.h5"
    plt.close(figure)


@pytest.mark.parametrize("interrupted,suffix", [(False, " (in progress)"),
                                                (True, " (ended early)")])
def test_title_says_how_the_run_stands(plt, log_path, tmp_path, interrupted, suffix):
    copy = tmp_path / "log.h5"
    copy.write_bytes(log_path.read_bytes())
    with h5py.File(copy, "r+") as f:
        f.attrs["complete"] = False
        f.attrs["interrupted"] = interrupted
    figure = draw(plt, read_log(copy), "log.h5")
    assert figure._suptitle.get_text() == "log.h5" + suffix
    plt.close(figure)


def test_epoch_line_prints_the_epoch_mean_and_labels_the_metric_as_validation(tmp_path,
                                                                              capsys):
    (tmp_path / "run.yaml").write_text(RUN)
    previous = neonlite.backends._current
    assert main(["train", str(tmp_path / "run.yaml"), "-o", str(tmp_path / "log.h5")]) == 0
    neonlite.backends._current = previous
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("epoch ")]
    log = read_log(tmp_path / "log.h5")
    assert len(lines) == 3
    for line, mean, metric in zip(lines, log["epoch"]["train_cost"], log["epoch"]["metric"]):
        assert f": mean train cost {mean:.4f}, valid misclassification {metric:.4f}, " in line


@pytest.fixture
def config(tmp_path):
    return shapes_run(tmp_path)


def test_plot_writes_a_picture(config, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed")
    log, png = tmp_path / "log.h5", tmp_path / "curves.png"
    assert main(["train", config, "-o", str(log), "-q"]) == 0
    assert main(["plot", str(log), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.strip() == f"wrote {png}"


def test_plot_without_matplotlib_says_how_to_get_it(config, tmp_path, capsys, monkeypatch):
    log = tmp_path / "log.h5"
    assert main(["train", config, "-o", str(log), "-q", "-e", "1"]) == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["plot", str(log), "-o", str(tmp_path / "c.png")]) == 1
    assert capsys.readouterr().err.strip() == (
        "neonlite: error: neonlite plot needs matplotlib: pip install 'neonlite[plot]' (or pip "
        "install matplotlib)")
    assert not (tmp_path / "c.png").exists()


def test_plot_refuses_a_checkpoint(config, tmp_path, capsys):
    assert main(["train", config, "-e", "1", "-q", "--save-path", str(tmp_path / "c.h5")]) == 0
    assert main(["plot", str(tmp_path / "c.h5")]) == 1
    assert "not a neonlite training log" in capsys.readouterr().err
    with pytest.raises(LogError, match="no such training log"):
        read_log(tmp_path / "none.h5")
