"""Padding is a mask, for every sequence layer: a batch of sequences of different lengths,
padded at the end with the Embedding's ``pad_id``, gives at every real position what each
sequence gives alone (a batch of its own length, no pads), forward and backward, in float64
within 1e-12; the pads add nothing to any parameter's gradient.

Each case is a model ``Embedding(pad_id) -> the layers of the case`` (the Embedding's
padding mask reaches the layers after it through the model), configured for T steps.  The
padded batch holds sequences of lengths LENGTHS; each sequence alone runs as a batch of its
length (every row the same sequence, the error on row 0 only), so the sum of those
gradients is what the padded batch must give.
"""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.layers import (GRU, LSTM, BiGRU, BiLSTM, BiRNN, BlockSparseAttention, DeepBiLSTM,
                             Embedding, FirstToken, MeanPool, MultiHeadAttention,
                             PositionalEmbedding, Recurrent, RecurrentLast, RecurrentMean,
                             RecurrentSum, TransformerBlock)

BSZ, T, VOCAB, D, PAD = 3, 8, 13, 8, 0
#: the block-sparse cases run at 16 steps, two blocks of 8 (their lengths cross a block edge)
BS_T, BS_LENGTHS = 16, (16, 3, 11)
LOCAL = {"local": {"window": 1}}
LENGTHS = (8, 3, 5)
TOLERANCE = 1e-12

CASES = {
    "positional embedding": lambda: [PositionalEmbedding(T)],
    "self-attention": lambda: [MultiHeadAttention(D, 2)],
    "causal self-attention": lambda: [MultiHeadAttention(D, 2, causal=True)],
    "transformer block, pre-norm causal": lambda: [TransformerBlock(D, 2)],
    "transformer block, post-norm": lambda: [TransformerBlock(D, 2, causal=False, norm="post")],
    "recurrent": lambda: [Recurrent(D)],
    "lstm": lambda: [LSTM(D)],
    "gru": lambda: [GRU(D)],
    "lstm, final state": lambda: [LSTM(D, return_sequences=False)],
    "gru, final state": lambda: [GRU(D, return_sequences=False)],
    "birnn": lambda: [BiRNN(D)],
    "bilstm": lambda: [BiLSTM(D)],
    "bigru, final states": lambda: [BiGRU(D, return_sequences=False)],
    "deep bilstm": lambda: [DeepBiLSTM(D, depth=2, merge="sum")],
    "mean pool": lambda: [TransformerBlock(D, 2, causal=False), MeanPool()],
    "first token": lambda: [TransformerBlock(D, 2, causal=False), FirstToken()],
    "recurrent last": lambda: [LSTM(D), RecurrentLast()],
    "recurrent sum": lambda: [GRU(D), RecurrentSum()],
    "recurrent mean": lambda: [Recurrent(D), RecurrentMean()],
    "block-sparse attention": lambda: [BlockSparseAttention(2, LOCAL, block_size=8,
                                                            causal=False)],
    "block-sparse attention, causal": lambda: [BlockSparseAttention(2, [[1, 0], [1, 1]],
                                                                    block_size=8)],
    "transformer block with block-sparse attention": lambda: [TransformerBlock(
        D, 2, causal=False, attention=BlockSparseAttention(2, LOCAL, block_size=8,
                                                           causal=False)), MeanPool()],
}


def _steps(case):
    """(T, the lengths of the padded batch's sequences) of ``case``."""
    return (BS_T, BS_LENGTHS) if "block-sparse" in case else (T, LENGTHS)


def _sequences(rng, lengths):
    return [rng.integers(1, VOCAB, size=length) for length in lengths]


def _padded(sequences, steps):
    ids = np.full((BSZ, steps), PAD, dtype=np.float64)
    for n, seq in enumerate(sequences):
        ids[n, :len(seq)] = seq
    return ids


def _model(case):
    model = Model([Embedding(VOCAB, D, pad_id=PAD, name="emb")] + CASES[case]())
    model.initialize(ArrayIterator(np.zeros((BSZ, _steps(case)[0])), shuffle=False))
    return model


def _grads(model):
    return {p.name: p.grad.get() for p in model.parameters()}


def _run(model, be, ids, error):
    """Outputs and parameter gradients for ``ids`` with output gradient ``error``."""
    model.zero_grads()
    y = model.fprop(be.array(ids)).get()
    model.bprop(be.array(error))
    return y, _grads(model)


@pytest.mark.parametrize("case", list(CASES))
def test_a_padded_batch_gives_what_each_sequence_gives_alone(case):
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    model = _model(case)
    steps, lengths = _steps(case)
    rng = np.random.default_rng(1)
    sequences = _sequences(rng, lengths)
    per_step = len(model.out_shape) == 2
    error = rng.normal(size=(BSZ,) + model.out_shape)
    if per_step:  # the pads' outputs take no error (a cost's ignore_index sees to that)
        for n, length in enumerate(lengths):
            error[n, length:] = 0.0
    y_pad, g_pad = _run(model, be, _padded(sequences, steps), error)
    assert np.all(g_pad["emb.W"][PAD] == 0.0), "a pad reached the Embedding's gradient"

    g_alone = {name: np.zeros_like(g) for name, g in g_pad.items()}
    for n, (seq, length) in enumerate(zip(sequences, lengths)):
        one = np.zeros((BSZ,) + (error[n, :length] if per_step else error[n]).shape)
        one[0] = error[n, :length] if per_step else error[n]
        y, g = _run(model, be, np.tile(seq.astype(np.float64), (BSZ, 1)), one)
        want = y[0]
        got = y_pad[n, :length] if per_step else y_pad[n]
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE,
                                   err_msg=f"{case}: sequence {n} (length {length}) forward")
        for name in g_alone:
            g_alone[name] += g[name]
    for name, g in g_pad.items():
        np.testing.assert_allclose(g, g_alone[name], rtol=0, atol=TOLERANCE,
                                   err_msg=f"{case}: the gradient of {name}")


@pytest.mark.parametrize("case", ["lstm", "bilstm", "transformer block, post-norm"])
def test_an_all_pad_batch_is_defined(case):
    """Every token a pad: finite outputs, and no error reaches any parameter."""
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    model = _model(case)
    y, grads = _run(model, be, np.full((BSZ, T), PAD, dtype=np.float64),
                    np.zeros((BSZ,) + model.out_shape))
    assert np.all(np.isfinite(y))
    assert all(np.all(g == 0.0) for g in grads.values())
