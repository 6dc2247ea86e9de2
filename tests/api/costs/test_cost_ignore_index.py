"""``CrossEntropyMulti(ignore_index=...)``: pad targets add nothing to the loss, its gradient
or the metrics, and the loss is the mean over the real targets, as PyTorch's
``cross_entropy(ignore_index=...)`` (float64, fused with its softmax and not); a batch of
pads only has loss 0 and gradient 0, no NaN; the option round-trips through YAML and
rejects what is not an integer."""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite import Model
from neonlite.config.build import build
from neonlite.data import ArrayIterator
from neonlite.layers import Activation, Affine, Embedding, GeneralizedCost, LSTM
from neonlite.transforms import CrossEntropyMulti, Softmax
from neonlite.transforms.metric import MetricError

torch = pytest.importorskip("torch", reason="PyTorch is the reference for ignore_index")

BSZ, T, K, IGNORE = 3, 5, 6, -100


def _targets(rng):
    t = rng.integers(0, K, (BSZ, T))
    t[0, 3:] = IGNORE
    t[2, 1:] = IGNORE
    return t


@pytest.mark.parametrize("fused", [True, False])
def test_loss_and_gradient_match_pytorch_ignore_index(fused):
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    rng = np.random.default_rng(0)
    logits, t = rng.normal(size=(BSZ, T, K)), _targets(rng)
    cost = GeneralizedCost(CrossEntropyMulti(ignore_index=IGNORE))
    softmax = Activation(Softmax())
    softmax.configure((T, K))
    softmax.allocate()
    cost.initialize(softmax if fused else Affine(K), (T, K), be)
    y = softmax.fprop(be.array(logits))
    value, delta = cost.cost_and_errors(y, be.array(t, dtype=np.int32))
    if not fused:
        delta = softmax.bprop(delta)

    x = torch.tensor(logits, requires_grad=True)
    want = torch.nn.functional.cross_entropy(x.reshape(-1, K), torch.tensor(t).reshape(-1),
                                             ignore_index=IGNORE)
    want.backward()
    assert value == pytest.approx(want.item(), rel=1e-12)
    assert cost.cost(y, be.array(t, dtype=np.int32)) == pytest.approx(want.item(), rel=1e-12)
    np.testing.assert_allclose(delta.get(), x.grad.numpy(), rtol=0, atol=1e-12)


def test_a_batch_of_pads_only_has_zero_loss_and_gradient():
    be = make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    model = Model([Embedding(K, 4, pad_id=0), LSTM(4), Affine(K, activation=Softmax())])
    model.initialize(ArrayIterator(np.zeros((BSZ, T)), shuffle=False),
                     GeneralizedCost(CrossEntropyMulti(ignore_index=0)))
    model.zero_grads()
    y = model.fprop(be.array(np.zeros((BSZ, T))))
    value, delta = model.cost.cost_and_errors(y, be.array(np.zeros((BSZ, T)), dtype=np.int32))
    model.bprop(delta)
    assert value == 0.0
    assert np.all(delta.get() == 0.0)
    assert all(np.all(p.grad.get() == 0.0) for p in model.parameters())


def test_eval_scores_only_the_real_targets():
    make_backend("cpu", batch_size=BSZ, seed=0, dtype=np.float64)
    rng = np.random.default_rng(1)
    model = Model([Embedding(K, 4), LSTM(4), Affine(K, activation=Softmax())])
    ids, t = rng.integers(0, K, (BSZ, T)).astype(np.float64), _targets(rng)
    data = ArrayIterator(ids, t, shuffle=False)
    model.initialize(data, GeneralizedCost(CrossEntropyMulti(ignore_index=IGNORE)))
    y = model.predict(ids)
    real = t != IGNORE
    want = np.mean(y.argmax(-1)[real] != t[real])
    assert model.eval(data) == pytest.approx(want)
    with pytest.raises(MetricError, match=r"every target of the data set 'pads' equals the "
                                         r"cost's ignore_index"):
        model.eval(ArrayIterator(ids, np.full((BSZ, T), IGNORE), shuffle=False, name="pads"))


def test_ignore_index_in_yaml_and_its_bad_values():
    make_backend("cpu", batch_size=BSZ, seed=0)
    cost = GeneralizedCost(build({"type": "CrossEntropyMulti", "config": {"ignore_index": -100}},
                                 "cost", "cost"))
    assert cost.costfunc.ignore_index == -100
    assert cost.get_description()["config"]["costfunc"]["config"] == {"ignore_index": -100}
    for bad in (1.5, "pad", True):
        with pytest.raises(ValueError, match=r"CrossEntropyMulti: ignore_index must be an "
                                             r"integer or null"):
            CrossEntropyMulti(ignore_index=bad)
