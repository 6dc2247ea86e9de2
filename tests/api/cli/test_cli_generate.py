"""``neonlite generate``: the text streams out as it is sampled (``-n 1000000000`` shows text
at once instead of after days), and bad sampling flags are one line, each case in its own
bounded process (``support.isolated``); on a checkpoint that is not a language model it is a
one-line error, and ``-t 0`` decodes greedily."""
import ast

import pytest
from support.example_checkpoints import example_checkpoints
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated

from neonlite.cli import main

LM = """\
epochs: 1
batchsize: 4
rng_seed: 0
eval_freq: 0
dataset: {type: text, config: {filename: text.txt, seq_len: 8, nbatches: 2}}
layers:
  - {type: Embedding, config: {vocab: 6, d: 8}}
  - {type: PositionalEmbedding, config: {max_len: 8, d: 8}}
  - {type: TransformerBlock, config: {d_model: 8, heads: 2}}
  - {type: Affine, config: {nout: 6, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: Adam, config: {learning_rate: 0.01}}
"""


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm")
    (folder / "text.txt").write_text("abcd " * 200 + "\n")
    (folder / "lm.yaml").write_text(LM)
    made = run_isolated(neonlite_argv("train", "lm.yaml", "-q", "--data-dir", ".",
                                      "--save-path", "lm.h5"), cwd=folder)
    assert made.status == 0, made.stderr
    return folder


@pytest.fixture
def table(tmp_path):
    return AttackTable(tmp_path / "generate.tsv")


def test_a_billion_characters_stream_out_as_they_are_sampled(lm, table):
    result = table.add("generate -n 1000000000 (cut after 15 s)", run_isolated(
        neonlite_argv("generate", "lm.h5", "-n", "1000000000", "-r", "1", "--prompt", "ab"),
        cwd=lm, seconds=15, memory_mib=1024))
    assert result.timed_out
    assert result.stdout.startswith("ab") and len(result.stdout) > 50, result.stdout[:200]
    assert set(result.stdout) <= set("abcd \n")


def test_streamed_text_is_the_text_generate_returns(lm):
    streamed = run_isolated(neonlite_argv("generate", "lm.h5", "-n", "40", "-r", "3"), cwd=lm)
    assert streamed.status == 0, streamed.stderr
    code = ("import numpy as np, neonlite\n"
            "from neonlite.generation import generate\n"
            "neonlite.gen_backend('cpu', batch_size=1, rng_seed=3)\n"
            "m = neonlite.Model.load('lm.h5')\n"
            "print(repr(generate(m, None, '\\n', 40, 1.0, None, 3)))\n")
    direct = run_isolated(python_argv(code), cwd=lm)
    assert direct.status == 0, direct.stderr
    assert streamed.stdout == "\n" + ast.literal_eval(direct.stdout) + "\n"


FLAGS = {
    "-r -1": (["-r", "-1"], "-r/--seed"),
    "-n -1": (["-n", "-1"], "-n/--chars"),
    "-t nan": (["-t", "nan"], "-t/--temperature"),
    "-t -1": (["-t", "-1"], "-t/--temperature"),
    "-k 0": (["-k", "0"], "-k/--top-k"),
    "-k 1000 on 6 characters": (["-k", "1000"], "[1, 6]"),
}


@pytest.mark.parametrize("attack", list(FLAGS))
def test_bad_sampling_flags_are_one_line(attack, lm, table):
    flags, phrase = FLAGS[attack]
    result = table.add(f"generate {attack}", run_isolated(
        neonlite_argv("generate", "lm.h5", "-n", "5", *flags), cwd=lm, memory_mib=1024))
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert phrase in result.message and result.stdout == "", (result.message, result.stdout)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return example_checkpoints(tmp_path_factory.mktemp("ckpt"))


def test_generate_on_a_cnn_checkpoint_is_a_one_line_error(checkpoints, capsys, keep_backend):
    _, cnn = checkpoints
    assert main(["generate", str(cnn), "-n", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"neonlite: error: {cnn}: "), err
    assert "Embedding" in err[0]


def test_temperature_zero_is_greedy(checkpoints, capsys, keep_backend):
    lm, _ = checkpoints
    outputs = []
    for seed in ("1", "2"):
        assert main(["generate", str(lm), "-t", "0", "-n", "12", "-r", seed,
                     "--prompt", "The "]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith("The ")
    assert len(outputs[0].rstrip("\n")) == len("The ") + 12
