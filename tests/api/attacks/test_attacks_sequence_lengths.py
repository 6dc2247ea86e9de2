"""Bad input to models of sequences of any length up to T (issue 33): each case runs in its
own process (``support.isolated``) under a time and memory bound, through the Python API
under the CLI's one-line error handling, and must end in one line ``neonlite: error: ...``
saying what, where and what was expected (or, for the cases that are defined, succeed with
the documented result).  The table attack -> outcome -> seconds, peak MiB, message is
``sequence_attacks.tsv`` in the module's temporary folder."""
import pytest
from support.isolated import AttackTable, python_argv, run_isolated

MEMORY_MIB = 2048
SECONDS = 60

SETUP = """\
import sys
import numpy as np
import neonlite
from neonlite import Model
from neonlite.cli.errors import run_guarded
from neonlite.config.build import build
from neonlite.data import ArrayIterator
from neonlite.layers import (Affine, Embedding, Flatten, GeneralizedCost, LSTM, MeanPool,
                             TransformerBlock)
from neonlite.transforms import CrossEntropyMulti, Softmax
be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
T = 16
def classifier():
    model = Model([Embedding(20, 8, pad_id=0, name="emb"), TransformerBlock(8, 2, name="block"),
                   MeanPool(name="pool"), Affine(3, activation=Softmax(), name="head")])
    model.initialize(ArrayIterator(np.ones((4, T)), shuffle=False))
    return model
def tagger(ignore_index=0):
    model = Model([Embedding(20, 8, pad_id=0, name="emb"), LSTM(8, name="lstm"),
                   Affine(20, activation=Softmax(), name="head")])
    model.initialize(ArrayIterator(np.ones((4, T)), np.ones((4, T, 20)), shuffle=False),
                     GeneralizedCost(CrossEntropyMulti(ignore_index=ignore_index)))
    return model
def attack():
"""

CASES = {
    "predict on a batch longer than the maximum":
        ("classifier().predict(np.ones((4, T + 5)))",
         "'predict input' has sequences of 21 steps, longer than the maximum of 16 that layer "
         "'emb' (Embedding)"),
    "fprop of a tensor longer than the maximum":
        ("classifier().fprop(be.array(np.ones((4, 40))))",
         "layer 'emb' (Embedding): the input has shape (4, 40)"),
    "a 100000-step batch":
        ("classifier().predict(np.ones((4, 100000)))",
         "sequences of 100000 steps, longer than the maximum of 16"),
    "a mask of another shape than the ids":
        ("classifier().predict((np.ones((4, 9)), np.ones((4, 8))))",
         "the mask has shape (4, 8); expected the ids' shape (4, 9)"),
    "a ragged mask":
        ("classifier().predict((np.ones((4, 9)), [[1] * 9, [1] * 3, [1], []]))",
         "the mask has shape ragged; expected the ids' shape (4, 9)"),
    "a mask of strings":
        ("classifier().predict((np.ones((4, 9)), np.full((4, 9), 'x')))",
         "the mask must be numeric 0/1, got dtype <U1"),
    "a mask holding 2":
        ("classifier().predict((np.ones((4, 9)), np.full((4, 9), 2)))",
         "the mask must hold only 0 (pad) and 1 (real token); mask[0, 0] is 2"),
    "a recurrent mask tensor of another dtype":
        ("tagger().layers.layers[1].fprop(be.array(np.ones((4, 5, 8))), "
         "mask=be.array(np.ones((4, 5)), dtype=np.int32))",
         "layer 'lstm' (LSTM): the mask must be a tensor of the backend's dtype float32, got "
         "int32"),
    "a recurrent mask of another length":
        ("tagger().layers.layers[1].fprop(be.array(np.ones((4, 5, 8))), mask=np.ones((4, 6)))",
         "layer 'lstm' (LSTM): mask must have shape (4, 5) (N, T), got (4, 6)"),
    "a shorter batch into Flatten after a sequence":
        ("(lambda m: (m.initialize(ArrayIterator(np.ones((4, T)), shuffle=False)), "
         "m.predict(np.ones((4, 5)))))(Model([Embedding(20, 8), Flatten(name='flat'), "
         "Affine(3)]))",
         "layer 'flat' (Flatten): the input has shape (4, 5, 8); expected (4, 16, 8)"),
    "ignore_index that is not an integer":
        ("build({'type': 'CrossEntropyMulti', 'config': {'ignore_index': 0.5}}, 'cost', 'cost')",
         "CrossEntropyMulti: ignore_index must be an integer or null, got 0.5"),
    "ignore_index with dense targets":
        ("(lambda m: m.cost.cost_and_errors(m.fprop(be.array(np.ones((4, 5)))), "
         "be.array(np.ones((4, 5, 20)))))(tagger())",
         "ignore_index=0 takes class-index targets (int32), got targets of dtype float32"),
    "eval where every target is ignored":
        ("tagger().eval(ArrayIterator(np.zeros((4, 6)), np.zeros((4, 6)), shuffle=False, "
         "name='pads'))",
         "every target of the data set 'pads' equals the cost's ignore_index"),
}

DEFINED = {
    "an all-pad batch: zero loss and gradient, finite outputs":
        "m = tagger(); y = m.fprop(be.array(np.zeros((4, 7))))\n"
        "    cost, delta = m.cost.cost_and_errors(y, be.array(np.zeros((4, 7)), dtype=np.int32))\n"
        "    m.bprop(delta)\n"
        "    assert cost == 0.0 and np.isfinite(y.get()).all() and not delta.get().any()\n"
        "    assert not any(p.grad.get().any() for p in m.parameters())\n"
        "    print('defined')",
    "an all-pad sentence pools to zeros":
        "y = classifier().predict((np.zeros((4, 6)), np.zeros((4, 6))))\n"
        "    assert np.isfinite(y).all()\n"
        "    print('defined')",
    "ignore_index equal to a class the data uses: that class is never scored":
        "m = tagger(ignore_index=3)\n"
        "    y = m.fprop(be.array(np.ones((4, 5))))\n"
        "    cost, _ = m.cost.cost_and_errors(y, be.array(np.full((4, 5), 3), dtype=np.int32))\n"
        "    assert cost == 0.0\n"
        "    print('defined')",
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    found = AttackTable(tmp_path_factory.mktemp("sequences") / "sequence_attacks.tsv")
    yield found
    found.write()


def _script(body):
    return SETUP + f"    {body}\n" + "sys.exit(run_guarded(lambda: (attack(), None)[1]))\n"


@pytest.mark.parametrize("attack", list(CASES))
def test_bad_input_is_one_line(table, attack):
    call, phrase = CASES[attack]
    result = run_isolated(python_argv(_script(call)), memory_mib=MEMORY_MIB, seconds=SECONDS)
    table.add(attack, result)
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert phrase in result.message, result.message


@pytest.mark.parametrize("attack", list(DEFINED))
def test_defined_cases_give_the_documented_result(table, attack):
    result = run_isolated(python_argv(_script(DEFINED[attack])), memory_mib=MEMORY_MIB,
                          seconds=SECONDS)
    table.add(attack, result)
    assert result.outcome == "success", result.stderr[-2000:]
    assert result.stdout.strip() == "defined"
