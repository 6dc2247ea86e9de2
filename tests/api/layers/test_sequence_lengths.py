"""A model built for sequences of at most T steps takes batches of any length T' <= T in
``fit``, ``eval``, ``predict`` and ``get_outputs``, without rebuilding or reallocating: its
results at T' are those of the same model built for T' (float64, exactly), and training
steps on lengths T, T/3, T/2, T allocate nothing after the first.  A layer that needs the
length it was built for (Flatten after a sequence) says so by name; ``describe`` shows the
maximum."""
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from support.checks import PEAK_LIMIT, allocation_peaks
from support.harness import build, make_backend

from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.layers import (LSTM, Affine, BlockSparseAffine, BlockSparseAttention, Embedding,
                             Flatten, L2Normalize, MeanPool, SegmentEmbedding, TiedLinear,
                             GeneralizedCost, MultiHeadAttention, PositionalEmbedding,
                             RecurrentMean, TransformerBlock)
from neonlite.layers.layer import ShapeError
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Softmax

BSZ, T, VOCAB, D = 4, 16, 11, 16
#: the smallest buffer of these models at T/3 steps holds BSZ * T/3 * D float32 = 320 bytes;
#: what a step kept of at least this much would be a buffer
BUFFER_BYTES = 256


def _language_model(block_sparse=False):
    """Embedding + positions, two transformer blocks (pre-norm causal, post-norm
    bidirectional, or a causal block-sparse attention), an LSTM and a per-token softmax."""
    second = TransformerBlock(D, 2, causal=False, norm="post", name="b1") if not block_sparse \
        else TransformerBlock(D, 2, name="b1", attention=BlockSparseAttention(
            2, {"local": {"window": 1}}, block_size=8, d_model=D))
    return Model([Embedding(VOCAB, D, name="emb"), PositionalEmbedding(T, name="pos"),
                  TransformerBlock(D, 2, name="b0"), second, LSTM(D, name="lstm"),
                  Affine(VOCAB, activation=Softmax(), name="head")])


def _data(rng, steps, n=BSZ):
    ids = rng.integers(0, VOCAB, (n, steps)).astype(np.float64)
    return ids, np.eye(VOCAB)[rng.integers(0, VOCAB, (n, steps))]


def test_every_length_gives_what_a_model_built_for_it_gives():
    make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    rng = np.random.default_rng(0)
    model = _language_model()
    cost = GeneralizedCost(CrossEntropyMulti())
    model.initialize(ArrayIterator(*_data(rng, T), shuffle=False), cost)
    for steps in (T, 4, 7, 1, T):
        X, Y = _data(rng, steps)
        data = ArrayIterator(X, Y, shuffle=False)
        alone = _language_model()
        alone.initialize(data, GeneralizedCost(CrossEntropyMulti()))
        alone.set_params(model.get_params())
        np.testing.assert_array_equal(model.predict(X), alone.predict(X))
        np.testing.assert_array_equal(model.get_outputs(data), alone.get_outputs(data))
        assert model.eval(data) == alone.eval(data)
        x, t = next(iter(data))
        want = _gradients(alone, x, t)
        for name, grad in _gradients(model, x, t).items():
            np.testing.assert_array_equal(grad, want[name], err_msg=name)
    model.fit(ArrayIterator(*_data(rng, 5), shuffle=False), Adam(1e-3), 1, cost, progress=False)
    assert model.in_shape == (T,)


def _gradients(model, x, t):
    model.zero_grads()
    model.bprop(model.cost.cost_and_errors(model.fprop(x), t)[1])
    return {p.name: p.grad.get() for p in model.parameters()}


def test_block_sparse_attention_runs_on_its_layout_cut_to_the_batch():
    """Every layer of this model is causal, so a batch of T' steps (not a multiple of the
    block size) gives the first T' positions of a batch of T steps that begins with it, and
    the gradients of an error on those positions only."""
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    rng = np.random.default_rng(0)
    model = _language_model(block_sparse=True)
    model.initialize(ArrayIterator(*_data(rng, T), shuffle=False),
                     GeneralizedCost(CrossEntropyMulti()))
    for steps in (4, 7, 9, 1, T):
        X, Y = _data(rng, T)
        short, full = be.array(X[:, :steps]), be.array(X)
        error = np.zeros((BSZ, T, VOCAB))
        error[:, :steps] = rng.normal(size=(BSZ, steps, VOCAB))
        got = [model.fprop(short).get()]
        got.append(_backward(model, error[:, :steps]))
        want = [model.fprop(full).get()[:, :steps]]
        want.append(_backward(model, error))
        np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-12)
        for name, grad in got[1].items():
            np.testing.assert_allclose(grad, want[1][name], rtol=0, atol=1e-12, err_msg=name)


def _backward(model, error):
    model.zero_grads()
    model.bprop(model.be.array(error))
    return {p.name: p.grad.get() for p in model.parameters()}


def test_training_on_lengths_t_t3_t2_t_allocates_no_array_after_the_first_batch():
    """The buffers are made for T once; the later batches run on views of their length.
    numpy's array memory (its own tracemalloc domain) holds no new array of a buffer's size
    after steps of lengths T/3, T/2, T (the prepared attention calls keep their operands'
    stride tables, a few hundred bytes, once per length), and the C kernels' work arrays are
    the same objects.  A length met
    for the first time makes its views and the kernels' prepared calls on them (small Python
    objects, once per length); a length met again allocates nothing of size at all."""
    be = make_backend("cpu", batch_size=BSZ, seed=0)
    rng = np.random.default_rng(0)
    model = _language_model()
    model.initialize(ArrayIterator(*_data(rng, T), shuffle=False),
                     GeneralizedCost(CrossEntropyMulti()))
    optimizer = Adam(1e-3)
    batches = [(be.array(X), be.array(Y.argmax(-1), dtype=np.int32))
               for X, Y in (_data(rng, s) for s in (T, T // 3, T // 2, T))]
    model.train_step(*batches[0], optimizer, 0)
    work = dict(be.kernels.workspaces)
    arrays = tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces([arrays])
        for batch in batches[1:]:
            assert np.isfinite(model.train_step(*batch, optimizer, 0))
        after = tracemalloc.take_snapshot().filter_traces([arrays])
    finally:
        tracemalloc.stop()
    new = _arrays(after) - _arrays(before)
    assert not new, f"steps of lengths T/3, T/2, T made arrays: {list(new.elements())}"
    assert be.kernels.workspaces.keys() == work.keys()
    assert all(be.kernels.workspaces[key] is buf for key, buf in work.items())
    again = iter(batches[1:])
    peaks = allocation_peaks(lambda: np.isfinite(model.train_step(*next(again), optimizer, 0)))
    assert max(peaks) < PEAK_LIMIT, f"lengths met before allocated up to {peaks} bytes"


def _arrays(snapshot):
    """The arrays of at least BUFFER_BYTES a snapshot holds, counted by (size, where)."""
    return Counter((trace.size, str(trace.traceback)) for trace in snapshot.traces
                   if trace.size >= BUFFER_BYTES)


def test_a_batch_longer_than_the_maximum_names_the_layer_the_length_and_the_maximum():
    be = make_backend("cpu", batch_size=BSZ, seed=0)
    rng = np.random.default_rng(0)
    model = _language_model()
    model.initialize(ArrayIterator(*_data(rng, T), shuffle=False))
    with pytest.raises(ShapeError, match=rf"layer 'emb' \(Embedding\): the input has shape "
                                         rf"\({BSZ}, {T + 1}\).*{T + 1} steps is longer than "
                                         rf"the maximum of {T}"):
        model.fprop(be.array(_data(rng, T + 1)[0]))
    with pytest.raises(ShapeError, match=rf"'predict input' has sequences of {T + 1} steps, longer than "
                                         rf"the maximum of {T} that layer 'emb' \(Embedding\)"):
        model.predict(_data(rng, T + 1)[0])


def test_flatten_after_a_sequence_takes_only_its_length():
    be = make_backend("cpu", batch_size=BSZ, seed=0)
    model = Model([Embedding(VOCAB, D), MultiHeadAttention(D, 2), Flatten(name="flat"),
                   Affine(3)])
    model.initialize(ArrayIterator(np.zeros((BSZ, T)), shuffle=False))
    with pytest.raises(ShapeError, match=r"layer 'flat' \(Flatten\): the input has shape "
                                         rf"\({BSZ}, 5, {D}\).*takes only sequences of the "
                                         rf"{T} steps it was built for"):
        model.fprop(be.array(np.zeros((BSZ, 5))))


def test_describe_shows_the_maximum_length():
    make_backend("cpu", batch_size=BSZ, seed=0)
    model = Model([Embedding(VOCAB, D), LSTM(D), RecurrentMean(), Affine(3)])
    model.initialize(ArrayIterator(np.zeros((BSZ, T)), shuffle=False))
    assert f"sequences of any length up to {T} steps" in model.describe()
    fixed = Model([Affine(3)])
    fixed.initialize(ArrayIterator(np.zeros((BSZ, 5)), shuffle=False))
    assert "any length" not in fixed.describe()


def test_a_tokenizers_ids_and_mask_pair_of_any_length():
    """``predict((ids, mask))`` with (N, T') arrays (as ``Tokenizer.encode_batch`` gives for a
    batch padded to its own longest member) gives the outputs of the ids padded to T with the
    pad id, and of each sentence alone."""
    make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    model = Model([Embedding(VOCAB, D, pad_id=0), PositionalEmbedding(T),
                   TransformerBlock(D, 2, causal=False), MeanPool()])
    model.initialize(ArrayIterator(np.ones((BSZ, T)), shuffle=False))
    rng = np.random.default_rng(2)
    lengths = [6, 2, 4, 5]
    ids = np.zeros((BSZ, max(lengths)))
    for n, length in enumerate(lengths):
        ids[n, :length] = rng.integers(1, VOCAB, length)
    mask = (ids != 0).astype(np.int64)
    pair = model.predict((ids.astype(np.int64), mask))
    padded = np.zeros((BSZ, T))
    padded[:, :ids.shape[1]] = ids
    np.testing.assert_allclose(pair, model.predict(padded), rtol=0, atol=1e-12)
    for n, length in enumerate(lengths):
        alone = model.predict(np.tile(ids[n, :length], (BSZ, 1)))
        np.testing.assert_allclose(pair[n], alone[0], rtol=0, atol=1e-12)


def _bert_like():
    """Token and segment embeddings, a post-norm block with a block-sparse MLP, a
    per-token L2 normalisation and the tied output projection."""
    mlp = {"local": {"window": 1}}
    block = TransformerBlock(D, 2, causal=False, norm="post",
                             fc1=BlockSparseAffine(2 * D, mlp, block_size=8),
                             fc2=BlockSparseAffine(D, mlp, block_size=8))
    return Model([Embedding(VOCAB, D, name="wte"), SegmentEmbedding(2), block, L2Normalize(),
                  TiedLinear("wte")])


def test_segment_tied_and_block_sparse_layers_take_any_length():
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    rng = np.random.default_rng(3)
    model = _bert_like()
    model.initialize(ArrayIterator(*_data(rng, T)[:1], shuffle=False))
    for steps in (5, T, 2):
        X = _data(rng, steps)[0]
        segments = be.array(rng.integers(0, 2, (BSZ, steps)).astype(np.float64))
        alone = _bert_like()
        alone.initialize(ArrayIterator(X, shuffle=False))
        alone.set_params(model.get_params())
        outputs, grads = [], []
        for net in (model, alone):
            net.layers.layers[1].segment_ids = segments
            outputs.append(net.fprop(be.array(X)).get())
            grads.append(_backward(net, np.ones(outputs[-1].shape)))
        np.testing.assert_array_equal(outputs[0], outputs[1])
        for name, grad in grads[0].items():
            np.testing.assert_array_equal(grad, grads[1][name], err_msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_cross_attention_takes_queries_and_context_of_any_lengths(causal):
    """Queries of Tq' <= Tq steps and a context of Tk' <= Tk steps (with a key-padding mask
    of Tk' steps) give what a layer built for (Tq', Tk') gives, forward and backward, the
    context's gradient included."""
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    rng = np.random.default_rng(4)
    big = build(MultiHeadAttention(D, 2, causal=causal, context_shape=(T, 6)), (T - 2, D))
    for tq, tk in ((3, 5), (T - 2, T), (1, 1), (4, 9)):
        x, c = rng.normal(size=(BSZ, tq, D)), rng.normal(size=(BSZ, tk, 6))
        mask = np.ones((BSZ, tk))
        mask[1, tk // 2 + 1:] = 0.0
        err = rng.normal(size=(BSZ, tq, D))
        small = build(MultiHeadAttention(D, 2, causal=causal, context_shape=(tk, 6)), (tq, D))
        results = []
        for net in (big, small):
            layer = net.layers[0]
            if net is small:
                for p, q in zip(small.parameters(), big.parameters()):
                    p.value.set(q.value.get())
            for p in net.parameters():
                p.grad[:] = 0.0
            y = layer.fprop(be.array(x), context=be.array(c), key_mask=be.array(mask)).get()
            dx = layer.bprop(be.array(err)).get()
            results.append([y, dx, layer.context_deltas.get()] +
                           [p.grad.get() for p in net.parameters()])
        for got, want in zip(*results):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
