"""``neonlite describe``: the layer table of a YAML run (without training it) and of a
checkpoint."""
import pytest
from support.shapes_run import shapes_run

from neonlite.cli import main


@pytest.fixture
def config(tmp_path):
    return shapes_run(tmp_path)


def test_describe_prints_the_table_without_training(config, capsys):
    assert main(["describe", config]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{config}: data set shapes, input (8, 8, 3), 4 classes"
    assert out[1].split() == ["layer", "type", "output", "shape", "params"]
    assert out[3].split()[:2] == ["Conv_0", "Conv"] and out[3].split()[-1] == "112"
    assert out[-1].split() == ["total", "372"]


def test_describe_a_checkpoint(config, tmp_path, capsys):
    assert main(["train", config, "-e", "1", "-q", "--save-path", str(tmp_path / "c.h5")]) == 0
    assert main(["describe", str(tmp_path / "c.h5")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"checkpoint {tmp_path / 'c.h5'} (epoch 1), input (8, 8, 3)"
    assert out[-1].split() == ["total", "372"]
