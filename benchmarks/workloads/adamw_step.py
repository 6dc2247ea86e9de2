"""One optimizer step of the nanoGPT recipe (:mod:`.nanogpt`): AdamW with decay groups,
schedule and global-norm clipping at 1.0, over the recipe model's parameters (0.8 M), random
gradients.  neonlite runs its fused step over the parameter arena; ``neonlite_per_param``
(an extra contender) the same optimizer per parameter (the model's arena switched off), so the
note gives the fused step's speed-up; PyTorch runs ``clip_grad_norm_`` + ``AdamW.step`` (its
default, foreach) on the same model.  Figure: ms per step (lower is better; ratio > 1:
neonlite faster)."""
import numpy as np

from . import nanogpt
from .common import FixedBatch

NAME = "adamw_step"
FIGURE = "ms"


def _model_and_grads(make_backend, smoke, arena):
    from neonlite.layers import GeneralizedCost
    from neonlite.transforms import CrossEntropyMulti
    n, T, d, heads, blocks = nanogpt.sizes(smoke)
    make_backend(n)
    model = nanogpt.neonlite_model(T, d, heads, blocks)
    model.initialize(FixedBatch((T,), (T, nanogpt.VOCAB)), GeneralizedCost(CrossEntropyMulti()))
    if not arena:
        model.arena = None
        for p in model.parameters():
            p.arena = None
    rng = np.random.default_rng(0)
    for p in model.parameters():
        p.grad.set(rng.normal(scale=0.01, size=p.grad.shape))
    opt = nanogpt.neonlite_optimizer()
    params = model.parameters()
    return lambda: opt.optimize(params, 0)


def neonlite(make_backend, smoke):
    return _model_and_grads(make_backend, smoke, True), None


def extra_contenders(make_backend, smoke):
    return {"neonlite_per_param": _model_and_grads(make_backend, smoke, False)}


def note(row):
    return f"fused {row['neonlite_per_param_s'] / row['neonlite_s']:.1f}x the per-parameter step"


def torch(device, smoke):
    import torch as th
    n, T, d, heads, blocks = nanogpt.sizes(smoke)
    model = nanogpt.torch_model(T, d, heads, blocks).to(device)
    opt = nanogpt.torch_optimizer(model)
    for p in model.parameters():
        p.grad = th.randn_like(p) * 0.01

    def step():
        th.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step, None
