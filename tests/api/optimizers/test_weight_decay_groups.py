"""Weight-decay groups (``decay_exclude``): AdamW leaving 1-D parameters (biases, norm gains)
and embeddings out of its decay matches PyTorch's AdamW with two parameter groups, in
float64 over a few steps, on the fused arena step and on the per-parameter path; SGD's
``wdecay`` likewise matches torch.optim.SGD's groups; the option round-trips through a YAML
description; the default still decays everything."""
import numpy as np
import pytest
from support.harness import make_backend

from neonlite import Model
from neonlite.config.build import build
from neonlite.layers import Affine, Embedding, GeneralizedCost, LayerNorm
from neonlite.optimizers import AdamW, CosineSchedule, GradientDescentMomentum
from neonlite.transforms import CrossEntropyMulti, Softmax

torch = pytest.importorskip("torch", reason="PyTorch is the reference for decay groups")


class _Data:
    shape, target_shape, name = (5,), (5,), "groups"


def _model(arena):
    make_backend("cpu", batch_size=2, seed=0, dtype=np.float64)
    model = Model([Embedding(9, 6, name="emb"), LayerNorm(name="ln"), Affine(8, name="fc"),
                   Affine(9, activation=Softmax(), name="head")])
    model.initialize(_Data(), GeneralizedCost(CrossEntropyMulti()))
    if not arena:
        model.arena = None
        for p in model.parameters():
            p.arena = None
    return model


def _excluded(p, exclude):
    return ("1d" in exclude and p.value.ndim < 2) or \
        ("embeddings" in exclude and p.name.startswith("emb."))


def _compare(make_ours, make_torch, exclude, arena, steps=5):
    model = _model(arena)
    params = model.parameters()
    mirrors = [torch.tensor(p.value.get(), requires_grad=True) for p in params]
    ours = make_ours()
    theirs = make_torch([{"params": [m for p, m in zip(params, mirrors)
                                     if not _excluded(p, exclude)]},
                         {"params": [m for p, m in zip(params, mirrors)
                                     if _excluded(p, exclude)], "weight_decay": 0.0}])
    rng = np.random.default_rng(2)
    for step in range(steps):
        for p, m in zip(params, mirrors):
            g = rng.normal(size=p.value.shape)
            p.grad.set(g)
            m.grad = torch.tensor(g)
        ours.optimize(params, 0)
        theirs.step()
    for p, m in zip(params, mirrors):
        np.testing.assert_allclose(p.value.get(), m.detach().numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=p.name)
    return model


@pytest.mark.parametrize("arena", [True, False], ids=["fused", "per_parameter"])
@pytest.mark.parametrize("exclude", [["1d"], ["1d", "embeddings"]], ids=["1d", "1d+emb"])
def test_adamw_groups_match_pytorch(exclude, arena):
    _compare(lambda: AdamW(1e-2, beta_1=0.9, beta_2=0.99, weight_decay=0.1,
                           decay_exclude=exclude),
             lambda groups: torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.99),
                                              weight_decay=0.1),
             exclude, arena)


@pytest.mark.parametrize("arena", [True, False], ids=["fused", "per_parameter"])
def test_sgd_wdecay_groups_match_pytorch(arena):
    _compare(lambda: GradientDescentMomentum(0.05, wdecay=0.01, decay_exclude=["1d"]),
             lambda groups: torch.optim.SGD(groups, lr=0.05, weight_decay=0.01),
             ["1d"], arena)


def test_default_decays_every_parameter():
    _compare(lambda: AdamW(1e-2, weight_decay=0.1),
             lambda groups: torch.optim.AdamW(groups[0]["params"] + groups[1]["params"],
                                              lr=1e-2, weight_decay=0.1),
             [], True)


def test_decay_exclude_round_trips_through_a_description():
    opt = AdamW(1e-3, weight_decay=0.1, decay_exclude=["1d"],
                schedule=CosineSchedule(100, 10, 0.1))
    desc = opt.get_description()
    assert desc["config"]["decay_exclude"] == ["1d"]
    again = build(desc, "optimizer", "optimizer")
    assert again.decay_exclude == ("1d",) and again.weight_decay == 0.1
