"""Every layer called directly (``layer.fprop(x)`` / ``layer.bprop(e)``, as a graph-free API
allows) checks its batch against the shapes it was configured and allocated for: a misshaped
batch is one ShapeError naming the layer and both shapes, and writes nothing (before, a leaf
layer's kernels ran on it: LayerNorm wrote past its buffers and the heap was corrupted)."""
import numpy as np
import pytest

import neonlite
from neonlite.layers import (GRU, LSTM, Activation, Affine, BatchNorm, BiLSTM, Conv,
                             Deconv, Dropout, Embedding, LayerNorm, MultiHeadAttention, Pooling,
                             RecurrentLast, RecurrentMean, ShapeError, TransformerBlock)
from neonlite.transforms import Rectlin

BATCH = 4

# (layer, one example's shape, a wrong input shape (with the batch axis))
CASES = [
    (lambda: Affine(6), (5,), (BATCH, 7)),
    (lambda: Affine(6), (5,), (BATCH + 1, 5)),
    (lambda: LayerNorm(), (3, 5), (BATCH, 3, 6)),
    (lambda: LayerNorm(), (3, 5), (BATCH, 4, 5)),
    (lambda: BatchNorm(), (5,), (BATCH, 6)),
    (lambda: Activation(Rectlin()), (5,), (BATCH, 6)),
    (lambda: Dropout(0.5), (5,), (BATCH - 1, 5)),
    (lambda: Conv((3, 3, 2)), (6, 6, 1), (BATCH, 7, 7, 1)),
    (lambda: Deconv((3, 3, 2)), (4, 4, 1), (BATCH, 4, 4, 2)),
    (lambda: Pooling(2), (6, 6, 1), (BATCH, 6, 6, 2)),
    (lambda: Embedding(10, 4), (5,), (BATCH, 6)),
    (lambda: MultiHeadAttention(8, 2), (4, 8), (BATCH, 5, 8)),
    (lambda: MultiHeadAttention(8, 2), (4, 8), (2 * BATCH, 4, 8)),
    (lambda: TransformerBlock(8, 2), (4, 8), (BATCH, 4, 6)),
    (lambda: RecurrentMean(), (4, 3), (BATCH, 4, 2)),
]


@pytest.fixture
def cpu():
    return neonlite.gen_backend("cpu", batch_size=BATCH, rng_seed=0, datatype=np.float64)


def built(make, shape, name="probe"):
    layer = make()
    layer.name = name
    if hasattr(layer, "name_children"):
        layer.name_children()
    layer.configure(shape)
    layer.set_needs_deltas(True)
    layer.allocate()
    return layer


def batch(be, shape, integers=False):
    rng = np.random.default_rng(0)
    return be.array(rng.integers(0, 10, size=shape) if integers else rng.normal(size=shape))


def snapshot(layer):
    return [None if t is None else t.get().copy() for t in (layer.outputs, layer.deltas)]


@pytest.mark.parametrize("make, shape, wrong", CASES)
def test_direct_fprop_of_a_misshaped_batch_is_one_shape_error(cpu, make, shape, wrong):
    layer = built(make, shape)
    integers = isinstance(layer, Embedding)
    layer.fprop(batch(cpu, (BATCH,) + shape, integers))
    before = snapshot(layer)
    kind = type(layer).__name__
    expected = ", ".join(map(str, (BATCH,) + shape))
    with pytest.raises(ShapeError, match=rf"layer 'probe' \({kind}\): the input has shape "
                                         rf"\({', '.join(map(str, wrong))}\); expected "
                                         rf"\({expected}\)"):
        layer.fprop(batch(cpu, wrong, integers))
    for now, then in zip(snapshot(layer), before):
        assert (now is None and then is None) or np.array_equal(now, then)


@pytest.mark.parametrize("make, shape, wrong", CASES)
def test_direct_bprop_of_a_misshaped_gradient_is_one_shape_error(cpu, make, shape, wrong):
    layer = built(make, shape)
    integers = isinstance(layer, Embedding)
    layer.fprop(batch(cpu, (BATCH,) + shape, integers))
    out = (BATCH,) + layer.out_shape
    bad = out[:-1] + (out[-1] + 1,)
    with pytest.raises(ShapeError, match=rf"layer 'probe' \({type(layer).__name__}\): the "
                                         rf"output gradient has shape "
                                         rf"\({', '.join(map(str, bad))}\)"):
        layer.bprop(batch(cpu, bad))
    layer.bprop(batch(cpu, out))


def test_an_unnamed_layer_is_named_by_its_class(cpu):
    layer = built(LayerNorm, (3, 5), name=None)
    with pytest.raises(ShapeError, match=r"^the LayerNorm layer: the input has shape"):
        layer.fprop(batch(cpu, (BATCH, 3, 6)))


@pytest.mark.parametrize("make", [LSTM, GRU])
def test_recurrent_layers_take_shorter_sequences_and_check_the_gradient(cpu, make):
    layer = built(lambda: make(3), (6, 2))
    layer.fprop(batch(cpu, (BATCH, 4, 2)))  # 4 of the 6 allocated steps
    with pytest.raises(ShapeError, match=r"layer 'probe' \(.*\): the output gradient has "
                                         r"shape \(4, 6, 3\); expected \(4, 4, 3\)"):
        layer.bprop(batch(cpu, (BATCH, 6, 3)))
    assert layer.bprop(batch(cpu, (BATCH, 4, 3))).shape == (BATCH, 4, 2)


def test_sequence_reductions_take_shorter_sequences_only(cpu):
    layer = built(RecurrentLast, (6, 3))
    x = batch(cpu, (BATCH, 4, 3))
    assert np.array_equal(layer.fprop(x).get(), x.get()[:, 3])
    for wrong in [(BATCH, 7, 3), (BATCH, 4, 2), (BATCH + 1, 4, 3)]:
        with pytest.raises(ShapeError, match=r"sequences of 1 to 6 steps of shape \(3,\)"):
            layer.fprop(batch(cpu, wrong))


def test_bidirectional_layers_take_shorter_sequences_only(cpu):
    """A shorter sequence runs on the views of its length of the merged (N, T, 2H) buffers
    (it once failed inside the merge with numpy's broadcast error); a longer one is refused
    up front, naming the layer, the length and the maximum."""
    layer = built(lambda: BiLSTM(3), (6, 2))
    layer.fprop(batch(cpu, (BATCH, 6, 2)))
    assert layer.fprop(batch(cpu, (BATCH, 5, 2))).shape == (BATCH, 5, 6)
    assert layer.bprop(batch(cpu, (BATCH, 5, 6))).shape == (BATCH, 5, 2)
    with pytest.raises(ShapeError, match=r"layer 'probe' \(BiLSTM\): the input has shape "
                                         r"\(4, 7, 2\).*7 steps is longer than the maximum of 6"):
        layer.fprop(batch(cpu, (BATCH, 7, 2)))
