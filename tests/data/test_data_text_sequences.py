"""TextSequences: a text's blank-line-separated passages (Tiny Shakespeare's speeches) as
sequences of many lengths, for a language model or a speaker label; its YAML entry."""
import numpy as np
import pytest

from neonlite.backends import gen_backend
from neonlite.config.auto_sizes import data_size
from neonlite.config.datasets import make_dataset
from neonlite.data.iterator import DataError
from neonlite.data.text_sequences import TextSequences, passages
from support.harness import data_dir
from support.requires import requires

PLAY = "".join(f"{who}:\n{line}\n\n" for who, line in [
    ("ANNA", "Good morrow."), ("BEN", "And to you,\nfair lady."), ("ANNA", "Whither?"),
    ("CLEO", "Hence."), ("BEN", "To the market."), ("ANNA", "Go then.")] * 4)


def _play(tmp_path, text=PLAY):
    path = tmp_path / "play.txt"
    path.write_text(text)
    return str(path)


def test_passages_are_the_blank_line_separated_blocks():
    assert passages("A:\nx\n\n\n  \nB:\ny\nz\n") == [["A:", "x"], ["B:", "y", "z"]]


def test_lm_sequences_are_whole_passages_with_a_pad_token_zero(tmp_path):
    gen_backend("cpu", batch_size=2, rng_seed=0)
    data = TextSequences(_play(tmp_path), max_len=32, valid_every=3)
    assert data.vocab.chars[0] == "\0" and data.pad_id == 0
    assert data.vocab.decode(data.ids[1]) == "BEN:\nAnd to you,\nfair lady."
    assert data.train_iter.ndata == 16 and data.valid_iter.ndata == 8
    assert data_size(data) == {"vocab": len(data.vocab), "nout": len(data.vocab)}


def test_label_task_keeps_the_most_frequent_speakers(tmp_path):
    gen_backend("cpu", batch_size=2, rng_seed=0)
    data = TextSequences(_play(tmp_path), max_len=32, task="label", top_labels=2,
                         valid_every=3)
    assert data.label_names == ["ANNA", "BEN"] and data.nclass == 2
    assert data.nleft_out == 4  # CLEO's four speeches
    assert data.vocab.decode(data.ids[1]) == "And to you,\nfair lady."
    assert list(data.labels[:3]) == [0, 1, 0]
    assert data_size(data) == {"vocab": len(data.vocab), "nout": 2}


def test_yaml_entry_builds_it(tmp_path):
    gen_backend("cpu", batch_size=2, rng_seed=0)
    data = make_dataset({"type": "sequences", "config": {
        "filename": _play(tmp_path), "max_len": 32, "multiple_of": 8, "ignore_index": -1}})
    x, t = next(iter(data.valid_iter))
    assert x.shape[1] % 8 == 0 and (t.get() == -1).any()


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=8),
     r"play.txt train: sequence 0 has 17 inputs, more than max_len=8 \(22 sequences"),
    (dict(task="tag"), "task must be one of lm, label"),
    (dict(top_labels=1), "top_labels must be an int >= 2"),
    (dict(valid_every=100), "25 passages .* too few"),
    (dict(overflow="drop"), "overflow must be one of refuse, cut"),
])
def test_bad_options_are_one_clear_error(tmp_path, kwargs, message):
    gen_backend("cpu", batch_size=2, rng_seed=0)
    with pytest.raises(DataError, match=message):
        TextSequences(_play(tmp_path, PLAY + "Z:\nz\n"),
                      **{"max_len": 64, **kwargs})


def test_a_text_holding_the_pad_character_is_refused(tmp_path):
    gen_backend("cpu", batch_size=2, rng_seed=0)
    with pytest.raises(DataError, match=r"holds the pad character"):
        TextSequences(_play(tmp_path, PLAY + "A:\nx\0y\n"), max_len=64)


@requires("shakespeare")
def test_tiny_shakespeare_speeches():
    gen_backend("cpu", batch_size=32, rng_seed=0)
    path = str(data_dir() / "text" / "tinyshakespeare.txt")
    lm = TextSequences(path, max_len=512, overflow="cut")
    lengths = np.concatenate([lm.train_iter.lengths, lm.valid_iter.lengths])
    assert len(lengths) == 7222 and lengths.min() < 10 and lengths.max() == 512
    assert lm.train_iter.ncut + lm.valid_iter.ncut > 0
    assert lm.train_iter.padding_fraction() < 0.2
    speakers = TextSequences(path, max_len=512, overflow="cut", task="label")
    assert speakers.label_names[0] == "GLOUCESTER" and speakers.nclass == 10


def test_data_option_fills_the_sequences_file(tmp_path):
    from neonlite.cli.data_option import with_data
    path = _play(tmp_path)
    entry = with_data({"type": "sequences", "config": {"max_len": 64}}, path)
    assert entry == {"type": "sequences", "config": {"max_len": 64, "filename": path}}
    with pytest.raises(Exception, match="data set 'text' or 'sequences' reads, but this run's "
                                        "data set is 'mnist'"):
        with_data({"type": "mnist"}, path)
