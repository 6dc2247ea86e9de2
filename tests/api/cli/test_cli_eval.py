"""``neonlite eval`` uses the run's own metric by default and offers every registered metric;
``neonlite generate`` on a checkpoint that is not a language model is a one-line error, and
``-t 0`` decodes greedily."""

import pytest

import neonlite
from neonlite.cli import build_parser, main
from neonlite.config import registry
from support.harness import CHECKOUT

EXAMPLES = CHECKOUT / "examples"


@pytest.fixture(autouse=True)
def keep_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    previous = neonlite.backends._current
    lm, cnn = root / "lm.h5", root / "cnn.h5"
    assert main(["train", str(EXAMPLES / "char_transformer.yaml"), "-e", "1", "--max-batches",
                 "1", "-z", "2", "-q", "--eval-freq", "0", "--save-path", str(lm)]) == 0
    assert main(["train", str(EXAMPLES / "shapes_cnn.yaml"), "-e", "1", "--max-batches", "1",
                 "-q", "--eval-freq", "0", "--save-path", str(cnn)]) == 0
    neonlite.backends._current = previous
    return lm, cnn


def test_eval_defaults_to_the_runs_metric(checkpoints, capsys):
    lm, cnn = checkpoints
    assert main(["eval", str(lm), "--max-batches", "1", "-z", "2"]) == 0
    assert capsys.readouterr().out.startswith("nats_per_token: ")
    assert main(["eval", str(cnn), "--max-batches", "1"]) == 0
    assert capsys.readouterr().out.startswith("misclassification: ")


def test_eval_offers_every_registered_metric(checkpoints, capsys):
    lm, _ = checkpoints
    parser = build_parser()
    action = next(a for sub in parser._subparsers._group_actions
                  for name, p in sub.choices.items() if name == "eval"
                  for a in p._actions if a.dest == "metric")
    offered = set(action.choices)
    for cls in registry.classes("metric").values():
        assert any(key == getattr(cls, "name", None) or key == "topk" and
                   cls.__name__ == "TopKMisclassification" for key in offered), cls.__name__
    assert main(["eval", str(lm), "--max-batches", "1", "-z", "2", "--metric",
                 "bits_per_character"]) == 0
    assert capsys.readouterr().out.startswith("bits_per_character: ")


def test_generate_on_a_cnn_checkpoint_is_a_one_line_error(checkpoints, capsys):
    _, cnn = checkpoints
    assert main(["generate", str(cnn), "-n", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"neonlite: error: {cnn}: "), err
    assert "Embedding" in err[0]


def test_temperature_zero_is_greedy(checkpoints, capsys):
    lm, _ = checkpoints
    outputs = []
    for seed in ("1", "2"):
        assert main(["generate", str(lm), "-t", "0", "-n", "12", "-r", seed,
                     "--prompt", "The "]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith("The ")
    assert len(outputs[0].rstrip("\n")) == len("The ") + 12
