"""Networks and settings too large for memory are refused before anything is allocated (issue
31, section 2): the memory check counts parameters, gradients, optimizer state, activations
and workspaces from the configured shapes, compares them with the memory available (the
child's address-space limit here) and names the largest consumer in one line.  Each case
runs ``neonlite train`` in its own process under a time and memory bound; the table
(attack -> outcome -> seconds, peak MiB, message) is written to ``memory_attacks.tsv`` in the
module's temporary folder.

Also checked here: the shapes the memory check counts for each parameter layer are the shapes
``allocate`` makes (so the estimate cannot drift from what is allocated), and a network that
fits is not refused.
"""

import numpy as np
import pytest
from support.harness import CHECKOUT
from support.attacks import GOOD
from support.isolated import AttackTable, neonlite_argv, run_isolated

MEMORY_MIB = 2048
SECONDS = 30
FLOOR_MIB = 256
REFUSE_SECONDS = 5.0
EXAMPLES = CHECKOUT / "examples"

SMALL_SHAPES = "dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, seed: 0}}"
SHAPES_768 = "dataset: {type: shapes, config: {n: 64, size: 16, classes: 4, seed: 0}}"
SHORT_TEXT = "config: {seq_len: 8, split: 0.9, nbatches: 2"


def good(*edits):
    text = GOOD
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


def example(name, *edits):
    text = (EXAMPLES / name).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


# attack -> (YAML text, extra flags, phrase of the one line)
CASES = {
    "Affine nout 1000000 on 768 inputs": (good(
        (SMALL_SHAPES, SHAPES_768),
        ("- {type: Conv, config: {fshape: [3, 3, 4], padding: 1, activation: {type: Rectlin}}}\n"
         "  - {type: Pooling, config: {fshape: 2}}\n",
         "- {type: Affine, config: {nout: 1000000}}\n")), (), "Affine_0"),
    "Conv fshape [3000, 3000, 64]": (good(
        ("fshape: [3, 3, 4], padding: 1", "fshape: [3000, 3000, 64], padding: 1500")), (),
        "Conv_0"),
    "LSTM nout 100000": (example(
        "char_lstm.yaml", ("config: {seq_len: 64, split: 0.9, nbatches: 500",
                           SHORT_TEXT), ("nout: 512", "nout: 100000")), (), "lstm0"),
    "PositionalEmbedding max_len 1e9": (example(
        "char_transformer.yaml", ("config: {seq_len: 128, split: 0.9, nbatches: 500",
                                  SHORT_TEXT), ("max_len: 128", "max_len: 1000000000")), (),
        "pos"),
    "Conv padding 3000": (good(("padding: 1", "padding: 3000")), (), "Conv_0"),
    "batchsize 1000000": (GOOD, ("-z", "1000000"), "batch"),
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return AttackTable(tmp_path_factory.mktemp("memory") / "memory_attacks.tsv")


@pytest.mark.parametrize("attack", list(CASES))
def test_too_large_network_is_refused_before_allocating(attack, table, tmp_path):
    text, flags, phrase = CASES[attack]
    path = tmp_path / "run.yaml"
    path.write_text(text)
    result = table.add(attack, run_isolated(
        neonlite_argv("train", path, "--max-batches", "1", "-q", *flags), cwd=tmp_path,
        memory_mib=MEMORY_MIB, seconds=SECONDS))
    assert result.outcome == "one-line error", (result.outcome, result.stderr[-2000:])
    assert phrase.lower() in result.message.lower(), result.message
    assert "memory" in result.message, result.message
    assert result.seconds < REFUSE_SECONDS, result.seconds
    assert result.peak_mib < FLOOR_MIB, result.peak_mib


def test_a_network_that_fits_trains(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(GOOD)
    result = run_isolated(neonlite_argv("train", path, "--max-batches", "1", "-q"),
                          cwd=tmp_path, memory_mib=MEMORY_MIB, seconds=SECONDS)
    assert result.outcome == "success", result.stderr[-2000:]


def test_planned_parameter_shapes_are_the_allocated_ones():
    """Every parameter layer of the examples and of a BERT and GPT-2 import: the shapes the
    memory check counts before ``allocate`` equal the parameters ``allocate`` makes."""
    import neonlite
    from neonlite.config.run import RunConfig
    from neonlite.config.datasets import make_dataset
    from neonlite.memory_check import planned_parameter_shapes
    from neonlite.serialize import ShapeStub
    checked = set()
    for name in ("shapes_cnn.yaml", "char_lstm.yaml", "char_transformer.yaml",
                 "cifar10_resnet.yaml", "conv_autoencoder.yaml", "blocksparse_transformer.yaml",
                 "inception_shapes.yaml"):
        run = RunConfig.from_file(EXAMPLES / name)
        neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
        data = make_dataset(run.settings["dataset"])
        model = run.build_model()
        model.layers.configure(tuple(data.shape))
        planned = {id(leaf): planned_parameter_shapes(leaf) for leaf in model.layers.leaves()}
        model.initialize(ShapeStub(data.shape))
        for leaf in model.layers.leaves():
            made = sorted(tuple(p.value.shape) for p in getattr(leaf, "own_parameters",
                                                                   leaf.parameters)())
            assert sorted(planned[id(leaf)]) == made, (name, leaf.name, type(leaf).__name__)
            checked.add(type(leaf).__name__)
    assert {"Linear", "Convolution", "Embedding", "PositionalEmbedding", "LSTM",
            "MultiHeadAttention", "LayerNorm", "BatchNorm", "Bias"} <= checked, checked


def test_planned_shapes_of_the_layers_no_example_uses():
    """GRU, Recurrent, bidirectional LSTM, segment embeddings, a transposed convolution, an
    attention without biases and a block-sparse linear: planned shapes are allocated shapes."""
    import neonlite
    from neonlite.layers import (GRU, BlockSparseLinear, Deconv, Embedding, Linear,
                                 MultiHeadAttention, Recurrent, SegmentEmbedding)
    from neonlite.layers.recurrent_stack import BiLSTM
    from neonlite.memory_check import planned_parameter_shapes
    from neonlite.serialize import ShapeStub
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
    networks = [
        ([Embedding(20, 8), GRU(6), Recurrent(5), BiLSTM(4), Linear(3)], (7,)),
        ([Embedding(20, 8), SegmentEmbedding(2, 8), MultiHeadAttention(8, 2, bias=False),
          BlockSparseLinear(16, block_size=8, layout=[[1, 1]])], (7,)),
        ([Deconv(fshape=(3, 3, 4), strides=2)], (5, 5, 3)),
    ]
    for layers, shape in networks:
        model = neonlite.Model(layers)
        model.layers.configure(shape)
        planned = {id(leaf): planned_parameter_shapes(leaf) for leaf in model.layers.leaves()}
        model.initialize(ShapeStub(shape))
        for leaf in model.layers.leaves():
            made = sorted(tuple(p.value.shape) for p in leaf.parameters())
            assert sorted(planned[id(leaf)]) == made, (type(leaf).__name__, leaf.name)
