"""bfloat16 training on the CPU against float32 (issue 36): one training step of a recipe in
neonlite ``-d bf16`` (bf16 storage, float32 masters through ``MixedPrecision``, as ``neonlite
train -d bf16`` runs it), neonlite float32, PyTorch float32 and PyTorch
``torch.autocast("cpu", dtype=torch.bfloat16)``, on the same model and the same batch.

Rows (:data:`WORKLOADS`):

* ``gpt512_bf16``: the character transformer of ``examples/gpt512_bf16.yaml`` (4 pre-norm
  blocks, d_model 512, 8 heads, T 128, batch 16, vocabulary 65, AdamW lr 6e-4 weight decay
  0.1); PyTorch runs the same network nanoGPT's way (:func:`.nanogpt.torch_model`). Tokens/s.
* ``nanogpt_bf16``: nanoGPT's CPU recipe of :mod:`.nanogpt` (d 128, where products are a
  smaller share of the step). Tokens/s.
* ``lenet_bf16``: the LeNet-style CNN of :mod:`.lenet`, batch 128. Images/s.

Contenders: ``neonlite`` (bf16), ``neonlite_f32``, ``torch`` (float32) and
``torch_autocast``; the row's ratio is PyTorch float32's time over neonlite bf16's, the note
gives bf16 against neonlite float32 and against autocast, and the path the products take here
(``neonlite doctor``).  A machine where ``-d bf16`` cannot run (``NEONLITE_BF16=off``, a
backend without bf16 storage) gives the row with that reason and no figures.
``benchmarks/bf16_training.py`` runs the same contenders each in a process of its own, for
their peak resident memory and a loss comparison.
"""
from . import lenet, nanogpt
from .common import FixedBatch, class_targets, random_batch, torch_threads

VOCAB = 65
GPT512_LR = 6e-4


def gpt512_sizes(smoke=False):
    """(batch, T, d, heads, blocks) of the d_model-512 recipe."""
    return (2, 16, 32, 2, 1) if smoke else (16, 128, 512, 8, 4)


def _tokens(n, T, seed=0):
    import numpy as np
    ids = np.random.default_rng(seed).integers(0, VOCAB, size=(n, T + 1))
    return ids[:, :-1], ids[:, 1:]


def make_bf16_backend(batch_size):
    """The CPU backend storing bfloat16 (what ``-d bf16`` makes)."""
    from neonlite import gen_backend
    return gen_backend("cpu", batch_size=batch_size, rng_seed=0, datatype="bfloat16")


def wrapped(optimizer, be):
    """``optimizer`` as ``neonlite train`` wraps it for the backend's storage (bf16: float32
    masters, no loss scale; float32: unchanged)."""
    from neonlite.optimizers.mixed_precision import for_datatype
    import numpy as np
    dtype = np.dtype(be.dtype)
    return for_datatype(optimizer, "bf16" if (dtype.metadata or {}).get("bfloat16") else "f32")


class _Recipe:
    """How one row builds its step: ``lm`` (a language model: sizes, neonlite optimizer,
    PyTorch optimizer, or None for LeNet)."""

    def __init__(self, name, figure, sizes=None, optimizer=None, torch_optimizer=None):
        self.name, self.figure = name, figure
        self.sizes, self.optimizer, self.torch_optimizer = sizes, optimizer, torch_optimizer

    def neonlite(self, make_backend, smoke):
        from neonlite.layers import GeneralizedCost
        from neonlite.transforms import CrossEntropyMulti
        if self.sizes is None:
            from neonlite.optimizers import GradientDescentMomentum
            be = make_backend(8 if smoke else 128)
            model = lenet.lenet_model()
            x, t = random_batch(be, (28, 28, 1), 10)
            opt = wrapped(GradientDescentMomentum(0.01, momentum_coef=0.9, wdecay=1e-4), be)
            return (lambda: model.train_step(x, t, opt, 0)), be.bsz
        n, T, d, heads, blocks = self.sizes(smoke)
        be = make_backend(n)
        model = nanogpt.neonlite_model(T, d, heads, blocks)
        model.initialize(FixedBatch((T,), (T, VOCAB)), GeneralizedCost(CrossEntropyMulti()))
        ids, nxt = _tokens(n, T)
        x, t = be.array(ids), class_targets(be, nxt, VOCAB)
        opt = wrapped(self.optimizer(), be)
        return (lambda: model.train_step(x, t, opt, 0)), n * T

    def torch(self, device, smoke, autocast=False):
        if self.sizes is None:
            step, work = lenet.torch(device, smoke)
            return (_autocast(step) if autocast else step), work
        import torch as th
        n, T, d, heads, blocks = self.sizes(smoke)
        torch_threads()
        th.manual_seed(0)
        model = nanogpt.torch_model(T, d, heads, blocks).to(device)
        opt = self.torch_optimizer(model)
        ids, nxt = _tokens(n, T)
        x, y = th.tensor(ids, device=device), th.tensor(nxt, device=device)

        def step():
            opt.zero_grad(set_to_none=False)
            with th.autocast("cpu", dtype=th.bfloat16, enabled=autocast):
                logits = model(x)
                loss = th.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                      y.reshape(-1))
            loss.backward()
            opt.step()
            return loss.item()
        return step, n * T


def _autocast(step):
    """``step`` (LeNet's PyTorch step) with its forward under bfloat16 autocast: the whole
    step runs inside, which autocast allows (backward takes the forward's types)."""
    import torch as th

    def run():
        with th.autocast("cpu", dtype=th.bfloat16):
            return step()
    return run


def _gpt512_optimizer():
    from neonlite.optimizers import AdamW
    return AdamW(GPT512_LR, weight_decay=0.1)


def _gpt512_torch_optimizer(model):
    import torch
    return torch.optim.AdamW(model.parameters(), lr=GPT512_LR, weight_decay=0.1)


RECIPES = {"gpt512_bf16": _Recipe("gpt512_bf16", "tokens/s", gpt512_sizes, _gpt512_optimizer,
                                  _gpt512_torch_optimizer),
           "nanogpt_bf16": _Recipe("nanogpt_bf16", "tokens/s", nanogpt.sizes,
                                   nanogpt.neonlite_optimizer, nanogpt.torch_optimizer),
           "lenet_bf16": _Recipe("lenet_bf16", "images/s")}


class Bf16Row:
    """One row of :mod:`benchmarks.run` (see the module docstring)."""

    def __init__(self, recipe):
        self.recipe = recipe
        self.NAME, self.FIGURE = recipe.name, recipe.figure

    def unavailable(self, smoke):
        """Why ``-d bf16`` cannot run here (None: it can)."""
        from neonlite.backends import BackendUnavailable
        try:
            make_bf16_backend(1)
        except (TypeError, ValueError, BackendUnavailable) as err:
            return f"-d bf16 cannot run here: {err}"
        return None

    def neonlite(self, make_backend, smoke):
        return self.recipe.neonlite(make_bf16_backend, smoke)

    def extra_contenders(self, make_backend, smoke):
        return {"neonlite_f32": self.recipe.neonlite(make_backend, smoke)[0]}

    def torch(self, device, smoke):
        return self.recipe.torch(device, smoke)

    def torch_contenders(self, device, smoke):
        return {"torch_autocast": self.recipe.torch(device, smoke, autocast=True)[0]}

    def note(self, row):
        from neonlite import get_backend
        parts = [f"f32 {row['neonlite_f32']:.1f}, bf16/f32 "
                 f"{row['neonlite'] / row['neonlite_f32']:.2f}x"]
        if "torch_autocast" in row:
            parts.append(f"autocast {row['torch_autocast']:.1f}, bf16/autocast "
                         f"{row['neonlite'] / row['torch_autocast']:.2f}x")
        be = get_backend()
        if hasattr(be, "bf16_path"):
            parts.append(f"gemm path {be.bf16_path('gemm')}")
        return "; ".join(parts)


WORKLOADS = tuple(Bf16Row(recipe) for recipe in RECIPES.values())
