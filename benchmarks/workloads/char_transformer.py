"""Character transformer train step: the example recipe (4 pre-norm blocks, d=128, 4 heads,
T=128, batch 32, vocab 65, AdamW); smoke mode 1 block, d=32, T=16, batch 2.  Figure:
tokens/s."""
import numpy as np

from .common import FixedBatch, class_targets, torch_threads

NAME = "char_lm_train"
FIGURE = "tokens/s"
VOCAB = 65


def _sizes(smoke):
    """(batch, T, d, heads, blocks)."""
    return (2, 16, 32, 2, 1) if smoke else (32, 128, 128, 4, 4)


def _tokens(n, T, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(n, T + 1))
    return ids[:, :-1], ids[:, 1:]


def neonlite(make_backend, smoke):
    from neonlite import Model
    from neonlite.layers import (Affine, Embedding, GeneralizedCost, LayerNorm,
                                 PositionalEmbedding, TransformerBlock)
    from neonlite.optimizers import AdamW
    from neonlite.transforms import CrossEntropyMulti, Softmax
    n, T, d, heads, blocks = _sizes(smoke)
    be = make_backend(n)
    model = Model([Embedding(VOCAB, d), PositionalEmbedding(T, d)]
                  + [TransformerBlock(d, heads) for _ in range(blocks)]
                  + [LayerNorm(), Affine(VOCAB, activation=Softmax())])
    model.initialize(FixedBatch((T,), (T, VOCAB)), GeneralizedCost(CrossEntropyMulti()))
    ids, nxt = _tokens(n, T)
    x, t = be.array(ids), class_targets(be, nxt, VOCAB)
    opt = AdamW(1e-3, weight_decay=0.1)
    return (lambda: model.train_step(x, t, opt, 0)), n * T


def torch(device, smoke):
    torch = torch_threads()
    nn = torch.nn
    n, T, d, heads, blocks = _sizes(smoke)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(VOCAB, d), nn.Parameter(torch.zeros(T, d))
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)

        def forward(self, x, mask):
            h = self.emb(x) + self.pos
            for block in self.blocks:
                h = block(h, mask)
            return self.head(self.ln(h))

    model = Net().to(device)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    ids, nxt = _tokens(n, T)
    x, y = torch.tensor(ids, device=device), torch.tensor(nxt, device=device)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(x, mask).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()
    return step, n * T
