"""Class-index targets: CrossEntropyMulti (fused with Softmax or not) and the backends'
softmax_cross_entropy take int32 class indices (N,) / (N, T) and give the same costs and
gradients as the one-hot targets (float64; the C kernel and the numpy reference each bit for
bit); an index outside [0, nclass) is one IndexError naming its position; the iterators yield
indices and the metrics accept them."""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite.backends.cpu.softmax import softmax_cross_entropy_kernel
from neonlite.backends.reference import softmax as numpy_softmax
from neonlite.data import ArrayIterator
from neonlite.layers import Activation, GeneralizedCost
from neonlite.transforms import (Accuracy, CrossEntropyMulti, LogLoss, Misclassification,
                                 NatsPerToken, Softmax, SumSquared, TopKMisclassification)

K = 7


def _case(shape, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=shape + (K,))
    idx = rng.integers(0, K, size=shape).astype(np.int32)
    onehot = np.eye(K)[idx]
    return logits, idx, onehot


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("kernel", ["c", "numpy"])
def test_backend_op_index_equals_one_hot_bit_for_bit(kernel, dtype):
    be = make_backend("cpu", batch_size=5, dtype=dtype)
    logits, idx, onehot = _case((40,))
    logits = logits.astype(dtype)
    outs = []
    for t in (idx, onehot.astype(dtype)):
        probs, grad = np.empty_like(logits), np.empty_like(logits)
        if kernel == "numpy":
            loss = numpy_softmax.softmax_cross_entropy(logits, t, probs, grad, 0.125)
        else:
            if not be.kernels.active(dtype):
                pytest.skip(f"no C kernels: {be.kernels.unavailable_reason()}")
            loss = softmax_cross_entropy_kernel(be.kernels, logits, t, probs, grad, 0.125)
        outs.append((loss, probs, grad))
    assert outs[0][0] == outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    np.testing.assert_array_equal(outs[0][2], outs[1][2])


@pytest.mark.parametrize("shape", [(6,), (3, 4)], ids=["classifier", "sequence"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_cost_index_targets_equal_one_hot(shape, fused):
    be = make_backend("cpu", batch_size=shape[0], dtype=np.float64)
    logits, idx, onehot = _case(shape, seed=1)
    results = []
    for targets in (be.array(idx, dtype=np.int32), be.array(onehot)):
        softmax = Activation(Softmax())
        softmax.configure(shape[1:] + (K,))
        softmax.allocate()
        cost = GeneralizedCost(CrossEntropyMulti())
        cost.initialize(softmax if fused else None, shape[1:] + (K,), be)
        y = softmax.fprop(be.array(logits))
        value, delta = cost.cost_and_errors(y, targets)
        results.append((value, delta.get()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-15)
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_a_cost_without_index_support_gets_one_hot_rows():
    be = make_backend("cpu", batch_size=4, dtype=np.float64)
    _, idx, onehot = _case((4,), seed=2)
    y = be.array(np.random.default_rng(0).random((4, K)))
    values = []
    for targets in (be.array(idx, dtype=np.int32), be.array(onehot)):
        cost = GeneralizedCost(SumSquared())
        cost.initialize(Activation(Softmax()), (K,), be)
        value, delta = cost.cost_and_errors(y, targets)
        values.append((value, delta.get()))
    assert values[0][0] == values[1][0]
    np.testing.assert_array_equal(values[0][1], values[1][1])


@pytest.mark.parametrize("kernel", ["c", "numpy", "unfused"])
def test_an_index_out_of_range_is_one_clear_error(kernel):
    be = make_backend("cpu", batch_size=2, dtype=np.float64)
    logits, idx, _ = _case((2, 3), seed=3)
    idx[1, 2] = K
    probs = np.empty_like(logits.reshape(6, K))
    if kernel == "numpy":
        with pytest.raises(IndexError, match=r"class index 7 at position 5 .* < 7"):
            numpy_softmax.softmax_cross_entropy(logits.reshape(6, K), idx.reshape(6), probs,
                                             probs.copy(), 1.0)
        return
    softmax = Activation(Softmax())
    softmax.configure((3, K))
    softmax.allocate()
    cost = GeneralizedCost(CrossEntropyMulti())
    cost.initialize(softmax if kernel == "c" else None, (3, K), be)
    y = softmax.fprop(be.array(logits))
    with pytest.raises(IndexError, match=r"class index 7 at position 5 is out of range"):
        cost.cost_and_errors(y, be.array(idx, dtype=np.int32))
    idx[1, 2] = -1
    with pytest.raises(IndexError, match=r"class index -1 at position 5"):
        cost.cost_and_errors(y, be.array(idx, dtype=np.int32))


def test_array_iterator_yields_int32_indices():
    be = make_backend("cpu", batch_size=4)
    X = np.arange(24, dtype=np.float32).reshape(6, 4)
    y = np.array([0, 2, 1, 2, 0, 1])
    it = ArrayIterator(X, y, nclass=3, shuffle=False)
    assert it.target_shape == ()
    x, t = next(iter(it))
    assert t.dtype == np.int32 and t.shape == (4,)
    np.testing.assert_array_equal(t.get(), y[:4])
    assert be.bsz == 4


def test_metrics_take_indices_and_one_hot_alike():
    rng = np.random.default_rng(4)
    y = rng.dirichlet(np.ones(K), size=12)
    _, idx, onehot = _case((12,), seed=4)
    for metric in (Misclassification(), Accuracy(), TopKMisclassification(3), LogLoss(),
                   NatsPerToken()):
        np.testing.assert_array_equal(metric(y, idx), metric(y, onehot), err_msg=metric.name)
    np.testing.assert_array_equal(NatsPerToken()(y, idx.reshape(3, 4)), NatsPerToken()(y, idx))

