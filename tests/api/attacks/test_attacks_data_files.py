"""Hostile data paths and checkpoints given to ``neonlite train``: each case in its own
process under a memory and time bound must end in one ``neonlite: error:`` line (the table
is written to the test's tmp folder as attacks.tsv)."""
import os
import sys

import pytest

from support.isolated import AttackTable, neonlite_argv, run_isolated

RUN = """\
epochs: 1
batchsize: 4
dataset: {{type: text, config: {{{dataset}seq_len: 8, nbatches: 2}}}}
layers:
  - {{type: Embedding, config: {{vocab: auto, d: 8}}}}
  - {{type: Affine, config: {{nout: auto, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam}}
"""


@pytest.fixture
def attack(tmp_path):
    table = AttackTable(tmp_path / "attacks.tsv")

    def run(name, *argv, expect="one-line error"):
        result = table.add(name, run_isolated(neonlite_argv(*argv), cwd=tmp_path,
                                              memory_mib=2048, seconds=120))
        assert result.outcome == expect, (name, result.stderr[-2000:])
        return result.message
    return run


def write(tmp_path, name, dataset=""):
    path = tmp_path / name
    path.write_text(RUN.format(dataset=dataset))
    return path


def test_data_paths_that_are_not_text_files(tmp_path, attack):
    run = write(tmp_path, "run.yaml")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "binary.txt").write_bytes(b"ab\xff\xfe" * 100)
    assert "not a text file" in attack("--data a character device", "train", run, "--data",
                                       "/dev/zero")
    assert "not a text file" in attack("--data a folder", "train", run, "--data", tmp_path)
    assert "not a text file" in attack("--data a FIFO", "train", run, "--data", fifo)
    assert "not UTF-8" in attack("--data binary bytes", "train", run, "--data",
                                 tmp_path / "binary.txt")
    device = write(tmp_path, "device.yaml", "filename: /dev/zero, ")
    assert "/dev/zero is not a regular file" in attack("filename: a character device", "train", device)
    folder = write(tmp_path, "folder.yaml", f"filename: {tmp_path}, ")
    assert "is not a regular file" in attack("filename: a folder", "train", folder)


def test_resume_alone_from_files_that_hold_no_run(tmp_path, attack):
    (tmp_path / "junk.h5").write_bytes(os.urandom(4096))
    attack("--resume random bytes", "train", "--resume", tmp_path / "junk.h5")
    code = ("import numpy as np; from neonlite import gen_backend, Model; "
            "from neonlite.layers import Affine; gen_backend('cpu', batch_size=2); "
            "from neonlite.data import ArrayIterator; "
            "m = Model([Affine(nout=2)]); m.initialize(ArrayIterator(np.zeros((4, 3)), "
            "np.zeros(4, int), nclass=2)); m.save('bare.h5')")
    assert run_isolated([sys.executable, "-c", code], cwd=tmp_path).status == 0
    message = attack("--resume a checkpoint saved outside a run", "train", "--resume",
                     tmp_path / "bare.h5")
    assert "holds no training run" in message
