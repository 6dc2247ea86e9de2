"""examples/shakespeare_speeches.py and its two YAML runs: Tiny Shakespeare's speeches in
bucketed batches, each padded to its own longest; a character LM and a speaker classifier
train a few batches, their figures are computed over real characters / speeches only, and
``neonlite train`` runs both YAML files (every batch at its own length, none at the
maximum)."""
import importlib.util

import numpy as np
import pytest
from support.harness import CHECKOUT, data_dir
from support.requires import requires

import neonlite
from neonlite.cli import main

ROOT = CHECKOUT
TEXT = data_dir() / "text" / "tinyshakespeare.txt"


def example():
    spec = importlib.util.spec_from_file_location("example_speeches",
                                                  ROOT / "examples" / "shakespeare_speeches.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@requires("shakespeare")
def test_lm_learns_and_is_scored_per_real_character(capsys):
    module = example()
    model, nats = module.speech_lm(str(TEXT), epochs=1, max_len=128, batch_size=16,
                                   max_batches=30)
    assert nats < np.log(66) - 0.5, "30 batches already beat the uniform guess"
    line = capsys.readouterr().out
    assert "nats per real character" in line and "pads" in line


@requires("shakespeare")
def test_speaker_classifier_reports_accuracy_against_the_majority(capsys):
    module = example()
    model, accuracy, baseline = module.speaker_classifier(str(TEXT), epochs=1, max_len=128,
                                                          batch_size=16, max_batches=10)
    assert 0.10 < baseline < 0.2 and 0.0 <= accuracy <= 1.0
    assert "against" in capsys.readouterr().out


def test_lm_score_leaves_out_pads_and_repeated_rows():
    module = example()
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    from neonlite.data.sequences import SequenceIterator
    data = SequenceIterator([[1, 2, 3], [2, 3]], max_len=4, shuffle=False)

    class Uniform:
        def fprop(self, x, inference=False):
            return neonlite.get_backend().array(np.full(x.shape + (5,), 0.2))
    assert module.lm_nats_per_character(Uniform(), data) == pytest.approx(np.log(5))


@requires("shakespeare")
@pytest.mark.parametrize("name", ["speeches_lm", "speaker_classifier"])
def test_yaml_runs_train_on_batches_of_their_own_length(name, tmp_path, monkeypatch):
    monkeypatch.setenv("NEONLITE_DATA", str(data_dir()))
    assert main(["train", str(ROOT / "examples" / f"{name}.yaml"), "-e", "1",
                 "--max-batches", "2", "-z", "4", "-q",
                 "--save-path", str(tmp_path / "m.h5")]) == 0
