"""Hostile sequence data (the ``sequences`` data set, ``SequenceIterator``): each case in its
own process under a memory and time bound ends in one ``neonlite: error:`` line naming what
is wrong, before any model is built (the table is written to the test's tmp folder as
attacks.tsv)."""
import pytest

from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated

RUN = """\
epochs: 1
batchsize: 4
dataset: {{type: sequences, config: {{filename: {text}, {options}}}}}
layers:
  - {{type: Embedding, config: {{vocab: auto, d: 8, pad_id: 0}}}}
  - {{type: MeanPool}}
  - {{type: Affine, config: {{nout: auto, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam}}
"""
PLAY = "".join(f"{who}:\n{line}\n\n" for who, line in [
    ("ANNA", "Good morrow, sir."), ("BEN", "And to you."), ("CLEO", "Hence, away!")] * 8)


@pytest.fixture
def attack(tmp_path):
    table = AttackTable(tmp_path / "attacks.tsv")

    def run(name, argv):
        result = table.add(name, run_isolated(argv, cwd=tmp_path, memory_mib=1024,
                                              seconds=120))
        assert result.outcome == "one-line error", (name, result.stderr[-2000:])
        return result.message
    return run


def _train(tmp_path, options, text="play.txt", content=PLAY):
    if content is not None:
        (tmp_path / text).write_text(content)
    run = tmp_path / f"run{abs(hash(options + text))}.yaml"
    run.write_text(RUN.format(text=text, options=options))
    return neonlite_argv("train", run, "--max-batches", "1")


@pytest.mark.parametrize("name, options, content, expected", [
    ("max_len 0", "max_len: 0, task: label", PLAY, "max_len must be a positive int"),
    ("max_len of a petabyte", "max_len: 100000000000000, task: label", PLAY,
     "more than the"),
    ("speech longer than max_len", "max_len: 8, task: label", PLAY,
     "sequence 0 has 17 tokens, more than max_len=8"),
    ("ignore_index a class", "max_len: 64, task: label, ignore_index: 1", PLAY,
     "ignore_index=1 is one of the 3 classes"),
    ("ignore_index a character", "max_len: 64, ignore_index: 5", PLAY,
     "ignore_index=5 is a token id of the data"),
    ("multiple_of negative", "max_len: 64, multiple_of: -8", PLAY,
     "multiple_of must be a positive int"),
    ("overflow unknown", "max_len: 64, overflow: drop", PLAY,
     "overflow must be one of refuse, cut"),
    ("the pad character in the text", "max_len: 64", PLAY + "ANNA:\nnul\0here\n",
     "holds the pad character"),
    ("an empty file", "max_len: 64", "", "0 passages"),
    ("one speaker only", "max_len: 64, task: label", "ANNA:\nhi\n\n" * 30,
     "at least 2 different first lines"),
])
def test_bad_sequence_data_is_one_line(tmp_path, attack, name, options, content, expected):
    assert expected in attack(name, _train(tmp_path, options, content=content))


def test_a_character_device_as_the_file(tmp_path, attack):
    assert "not a regular file" in attack("filename /dev/zero",
                                          _train(tmp_path, "max_len: 64", "/dev/zero", None))


def test_python_api_mask_of_the_wrong_shape_or_values(tmp_path, attack):
    head = ("import numpy as np; from neonlite import gen_backend; "
            "from neonlite.data import SequenceIterator; gen_backend('cpu', batch_size=2); "
            "from neonlite.cli.errors import run_guarded; ids = np.ones((2, 5), int); ")
    shape = head + "raise SystemExit(run_guarded(lambda: SequenceIterator((ids, " \
                   "np.ones((2, 4))), 8)))"
    values = head + "raise SystemExit(run_guarded(lambda: SequenceIterator((ids, " \
                    "np.full((2, 5), 0.5)), 8)))"
    assert "ids (2, 5) and mask (2, 4) differ in shape" in attack("mask shape",
                                                                  python_argv(shape))
    assert "the mask must hold only 0" in attack("mask values", python_argv(values))


LM_RUN = """\
epochs: 1
batchsize: 4
dataset: {{type: sequences, config: {{filename: play.txt, max_len: 64{data}}}}}
layers:
  - {{type: Embedding, config: {{vocab: auto, d: 8}}}}
  - {{type: LSTM, config: {{nout: 8}}}}
  - {{type: Affine, config: {{nout: auto, activation: {{type: Softmax}}}}}}
cost: {{type: GeneralizedCost, config: {{costfunc: {{type: CrossEntropyMulti{cost}}}}}}}
optimizer: {{type: Adam}}
"""


@pytest.mark.parametrize("name, data, cost", [
    ("cost without ignore_index", "", ""),
    ("cost ignoring another index", ", ignore_index: -1",
     ", config: {ignore_index: -100}"),
])
def test_pad_targets_the_cost_would_count_are_refused(tmp_path, attack, name, data, cost):
    (tmp_path / "play.txt").write_text(PLAY)
    run = tmp_path / "lm.yaml"
    run.write_text(LM_RUN.format(data=data, cost=cost))
    message = attack(name, neonlite_argv("train", run))
    assert "gives its pad positions the target" in message and "ignore_index" in message
