"""Where a run's data files are found: a named text file that is not found is one error naming
every place looked (never the built-in text in its place); relative paths in a YAML resolve
against the YAML's own folder, then the data root; ``--data FILE`` on ``neonlite train``,
``eval`` and ``generate``; ``neonlite eval CKPT`` finds the text its run trained on."""

import numpy as np
import pytest

from neonlite.cli import main
from neonlite.serialize import read_checkpoint
from support.requires import requires
from support.harness import CHECKOUT, data_dir

ROOT = CHECKOUT
TEXT = "the quick brown fox jumps over the lazy dog. " * 60

RUN = """\
epochs: 1
batchsize: 4
rng_seed: 0
metric: {{type: NatsPerToken}}
vocab: &vocab {vocab}
dataset: {{type: text, config: {{{dataset}seq_len: 8, nbatches: 3}}}}
layers:
  - {{type: Embedding, config: {{vocab: *vocab, d: 8, name: embed}}}}
  - {{type: Affine, config: {{nout: *vocab, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam, config: {{learning_rate: 0.01}}}}
"""


def text_run(folder, filename=None, vocab=28):
    """``folder/run.yaml``, a text run on ``filename`` (None: the built-in text)."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset = "" if filename is None else f"filename: {filename}, "
    path = folder / "run.yaml"
    path.write_text(RUN.format(vocab=vocab, dataset=dataset))
    return path


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run from an unrelated folder with an empty data root in $NEONLITE_DATA."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NEONLITE_DATA", str(tmp_path / "env_root"))
    return tmp_path


def one_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("neonlite: error: "), err
    return err[0]


@pytest.mark.parametrize("vocab", [28, 65])
def test_a_named_text_file_not_found_is_one_error_naming_every_place(elsewhere, capsys, vocab):
    run = text_run(elsewhere / "cfg", "missing.txt", vocab)
    assert main(["train", str(run), "--data-dir", str(elsewhere / "root")]) == 1
    line = one_error(capsys)
    assert "'missing.txt'" in line
    for place in (elsewhere / "cfg", elsewhere / "root" / "text", elsewhere / "root"):
        assert str(place / "missing.txt") in line
    assert main(["train", str(run)]) == 1
    line = one_error(capsys)
    for place in (elsewhere / "cfg", elsewhere / "env_root" / "text", elsewhere / "env_root"):
        assert str(place / "missing.txt") in line


def test_without_a_file_name_the_built_in_text_is_used(elsewhere, capsys):
    run = text_run(elsewhere / "cfg", None, 103)
    assert main(["train", str(run), "-q"]) == 0


def test_the_python_api_refuses_a_named_file_it_cannot_find(elsewhere):
    from neonlite.backends import gen_backend
    from neonlite.data import DataError, TextCorpus
    gen_backend("cpu", batch_size=4)
    with pytest.raises(DataError, match="missing.txt.*env_root"):
        TextCorpus(filename="missing.txt")


def test_relative_text_path_resolves_against_the_yaml_folder(elsewhere, capsys):
    (elsewhere / "cfg" / "texts").mkdir(parents=True)
    (elsewhere / "cfg" / "texts" / "fox.txt").write_text(TEXT)
    run = text_run(elsewhere / "cfg", "texts/fox.txt")
    ckpt = elsewhere / "fox.h5"
    assert main(["train", str(run), "-q", "--save-path", str(ckpt)]) == 0
    # the checkpoint records where the text was found, so eval needs no --data-dir
    recorded = read_checkpoint(ckpt).config["dataset"]["config"]["filename"]
    assert recorded == str(elsewhere / "cfg" / "texts" / "fox.txt")
    assert main(["eval", str(ckpt)]) == 0
    assert capsys.readouterr().out.startswith("nats_per_token: ")


def test_eval_of_a_text_checkpoint_needs_no_data_dir(elsewhere, capsys):
    root = elsewhere / "root"
    (root / "text").mkdir(parents=True)
    (root / "text" / "fox.txt").write_text(TEXT)
    run = text_run(elsewhere / "cfg", "fox.txt")
    ckpt = elsewhere / "fox.h5"
    assert main(["train", str(run), "-q", "--data-dir", str(root), "--save-path",
                 str(ckpt)]) == 0
    assert main(["eval", str(ckpt)]) == 0
    assert capsys.readouterr().out.startswith("nats_per_token: ")
    (root / "text" / "fox.txt").unlink()
    assert main(["eval", str(ckpt)]) == 1
    assert str(root / "text" / "fox.txt") in one_error(capsys)


def test_relative_hdf5_paths_resolve_against_the_yaml_folder(elsewhere, capsys):
    import h5py
    cfg = elsewhere / "cfg"
    (cfg / "h5").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in (("train.h5", 32), ("valid.h5", 8)):
        with h5py.File(cfg / "h5" / name, "w") as f:
            f["x"] = rng.integers(0, 255, (n, 6), dtype=np.uint8)
            f["y"] = rng.integers(0, 3, n).astype(np.int64)
    run = cfg / "run.yaml"
    run.write_text("epochs: 1\nbatchsize: 8\n"
                   "dataset: {type: hdf5, config: {train: h5/train.h5, valid: h5/valid.h5, "
                   "nclass: 3}}\n"
                   "layers: [{type: Affine, config: {nout: 3, activation: {type: Softmax}}}]\n"
                   "cost: CrossEntropyMulti\noptimizer: {type: Adam}\n")
    assert main(["train", str(run), "-q"]) == 0
    run.write_text(run.read_text().replace("h5/valid.h5", "h5/nope.h5"))
    assert main(["train", str(run), "-q", "--data-dir", str(elsewhere / "root")]) == 1
    line = one_error(capsys)
    assert str(cfg / "h5" / "nope.h5") in line and str(elsewhere / "root" / "h5" / "nope.h5") \
        in line


def test_data_flag_trains_evaluates_and_generates_on_a_text_file(elsewhere, capsys):
    fox = elsewhere / "fox.txt"
    fox.write_text(TEXT)
    run = text_run(elsewhere / "cfg", None, "auto")
    ckpt = elsewhere / "fox.h5"
    assert main(["train", str(run), "-q", "--data", str(fox), "--save-path", str(ckpt)]) == 0
    saved = read_checkpoint(ckpt)
    assert saved.config["dataset"]["config"]["filename"] == str(fox)
    assert saved.params["embed.W"].shape[0] == len(set(TEXT))
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--data", str(fox)]) == 0
    assert capsys.readouterr().out.startswith("nats_per_token: ")
    assert main(["generate", str(ckpt), "--data", str(fox), "--prompt", "the", "-n", "5"]) == 0
    assert capsys.readouterr().out.startswith("the")
    assert main(["generate", str(ckpt), "--data", str(elsewhere)]) == 1
    assert one_error(capsys).endswith(f"--data {elsewhere}: not a text file")


def test_data_flag_that_does_not_exist_is_one_error(elsewhere, capsys):
    run = text_run(elsewhere / "cfg", None, "auto")
    assert main(["train", str(run), "--data", str(elsewhere / "nope.txt")]) == 1
    assert str(elsewhere / "nope.txt") in one_error(capsys)


def test_data_flag_on_an_image_run_is_one_error(elsewhere, capsys):
    fox = elsewhere / "fox.txt"
    fox.write_text(TEXT)
    assert main(["train", str(ROOT / "examples" / "shapes_cnn.yaml"), "--data", str(fox)]) == 1
    line = one_error(capsys)
    assert "--data" in line and "shapes" in line


@requires("shakespeare")
def test_char_transformer_example_trains_on_a_text_given_with_data(elsewhere, capsys):
    text = data_dir() / "text" / "tinyshakespeare.txt"
    assert main(["train", str(ROOT / "examples" / "char_transformer.yaml"), "--data", str(text),
                 "--max-batches", "2", "-q"]) == 0
