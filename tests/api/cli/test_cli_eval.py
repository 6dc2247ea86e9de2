"""``neonlite eval`` uses the run's own metric by default and offers every registered metric."""
import pytest
from support.example_checkpoints import example_checkpoints

from neonlite.cli import build_parser, main
from neonlite.config import registry


pytestmark = pytest.mark.usefixtures("keep_backend")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return example_checkpoints(tmp_path_factory.mktemp("ckpt"))


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
