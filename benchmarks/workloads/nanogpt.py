"""nanoGPT's CPU recipe ("I only have a macbook"), one training step: 4 pre-norm blocks, 4
heads, d=128, context 64, batch 12, vocabulary 65; AdamW (betas (0.9, 0.99), weight decay 0.1
on the parameters of 2 or more axes), learning rate 1e-3 with 100 warm-up steps and cosine
decay to 1e-4 over 2000 steps, gradient clipping at global norm 1.0.  Smoke mode: 1 block,
d=32, T=16, batch 2.  Figure: tokens/s.

PyTorch runs the same network the way nanoGPT writes it (fused QKV projection and
``scaled_dot_product_attention(is_causal=True)``, biases everywhere, untied head)."""
import math

import numpy as np

from .common import FixedBatch, class_targets, torch_threads

NAME = "nanogpt_cpu"
FIGURE = "tokens/s"
VOCAB = 65
LR, MIN_LR, WARMUP, STEPS = 1e-3, 1e-4, 100, 2000


def sizes(smoke=False):
    """(batch, T, d, heads, blocks)."""
    return (2, 16, 32, 2, 1) if smoke else (12, 64, 128, 4, 4)


def _tokens(n, T, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(n, T + 1))
    return ids[:, :-1], ids[:, 1:]


def neonlite_model(T, d, heads, blocks, vocab=VOCAB):
    """The recipe's network as neonlite layers (not yet initialized)."""
    from neonlite import Model
    from neonlite.layers import (Affine, Embedding, LayerNorm, PositionalEmbedding,
                                 TransformerBlock)
    from neonlite.transforms import Softmax
    return Model([Embedding(vocab, d), PositionalEmbedding(T, d)]
                 + [TransformerBlock(d, heads) for _ in range(blocks)]
                 + [LayerNorm(), Affine(vocab, activation=Softmax())])


def neonlite_optimizer():
    """The recipe's AdamW with its schedule and clipping."""
    from neonlite.optimizers import AdamW, CosineSchedule
    return AdamW(LR, beta_1=0.9, beta_2=0.99, weight_decay=0.1,
                 schedule=CosineSchedule(STEPS, WARMUP, MIN_LR / LR), gradient_clip_norm=1.0,
                 **_decay_groups())


def _decay_groups():
    from neonlite.optimizers import AdamW
    import inspect
    return {"decay_exclude": ["1d"]} if "decay_exclude" in inspect.signature(AdamW).parameters \
        else {}


def neonlite(make_backend, smoke):
    from neonlite.layers import GeneralizedCost
    from neonlite.transforms import CrossEntropyMulti
    n, T, d, heads, blocks = sizes(smoke)
    be = make_backend(n)
    model = neonlite_model(T, d, heads, blocks)
    model.initialize(FixedBatch((T,), (T, VOCAB)), GeneralizedCost(CrossEntropyMulti()))
    ids, nxt = _tokens(n, T)
    x, t = be.array(ids), class_targets(be, nxt, VOCAB)
    opt = neonlite_optimizer()
    return (lambda: model.train_step(x, t, opt, 0)), n * T


def torch_model(T, d, heads, blocks, vocab=VOCAB):
    """The recipe's network as a PyTorch module, nanoGPT style."""
    torch = torch_threads()
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):
            B, L, _ = x.shape
            q, k, v = (z.view(B, L, heads, d // heads).transpose(1, 2)
                       for z in self.qkv(x).split(d, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(B, L, d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(T, d))
            nn.init.normal_(self.pos, std=0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, x):
            h = self.emb(x) + self.pos[:x.shape[1]]
            for block in self.blocks:
                h = block(h)
            return self.head(self.ln(h))
    return Net()


def torch_optimizer(model):
    """nanoGPT's AdamW: decay on parameters of 2+ axes only."""
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.99))


def torch_lr(step):
    """nanoGPT's get_lr: linear warm-up, cosine decay to MIN_LR."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    ratio = min(1.0, (step - WARMUP) / (STEPS - WARMUP))
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def torch_train_step(model, opt, x, y, step):
    """One nanoGPT training step; returns the loss (float)."""
    import torch
    for group in opt.param_groups:
        group["lr"] = torch_lr(step)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def torch(device, smoke):
    import torch as th
    n, T, d, heads, blocks = sizes(smoke)
    model = torch_model(T, d, heads, blocks).to(device)
    opt = torch_optimizer(model)
    ids, nxt = _tokens(n, T)
    x, y = th.tensor(ids, device=device), th.tensor(nxt, device=device)
    return (lambda: torch_train_step(model, opt, x, y, 0)), n * T
