"""The text data set's names: its train and valid parts are labelled by the text file they
read (``<file> train`` / ``<file> valid``), as the progress and evaluation lines show them."""
import numpy as np

import neonlite
from neonlite.cli import main
from neonlite.data.text import TextCorpus

TEXT = "to be or not to be, that is the question\n" * 40


def test_a_file_in_a_data_directory_is_named_by_the_file(tmp_path):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "hamlet.txt").write_text(TEXT)
    corpus = TextCorpus(path=str(tmp_path), filename="hamlet.txt", seq_len=8)
    assert corpus.name == "hamlet.txt train"
    assert corpus.valid_iter.name == "hamlet.txt valid"
    direct = TextCorpus(path=str(tmp_path / "text" / "hamlet.txt"), seq_len=8)
    assert direct.valid_iter.name == "hamlet.txt valid"


def test_the_eval_line_names_the_text_file(tmp_path, capsys):
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "hamlet.txt").write_text(TEXT)
    yaml = tmp_path / "lm.yaml"
    yaml.write_text("""
epochs: 1
batchsize: 4
rng_seed: 0
metric: {type: NatsPerToken}
dataset: {type: text, config: {filename: hamlet.txt, seq_len: 8, nbatches: 2}}
layers:
  - {type: Embedding, config: {vocab: 17, d: 8}}
  - {type: Affine, config: {nout: 17, activation: Softmax}}
cost: CrossEntropyMulti
optimizer: {type: Adam, config: {learning_rate: 0.01}}
""")
    ckpt = tmp_path / "lm.h5"
    assert main(["train", str(yaml), "--data-dir", str(tmp_path), "--save-path", str(ckpt)]) == 0
    out = capsys.readouterr()
    assert "; hamlet.txt train (8,)" in out.out + out.err
    assert main(["eval", str(ckpt), "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "(hamlet.txt valid, epoch 1)" in out.out, out
