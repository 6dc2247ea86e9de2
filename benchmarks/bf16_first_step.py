"""Where ``-d bf16`` loses loss against float32, one update at a time: ``python -m
benchmarks.bf16_first_step [--row gpt512_bf16|nanogpt_bf16] [--lr LR] [--text PATH]``.

From the same initial weights (float32 ones rounded to bf16) and the same Tiny Shakespeare
batch, one AdamW step (float32 masters, ``MixedPrecision``) in float32 and in bf16; then the
cost of a second batch under: the float32 model, the bf16 model, and float32 forwards of the
float32 step's masters rounded to bf16 (all parameters; the 2-D product weights only; the
embeddings, biases and norm gains only).  It also prints the fraction of the product weights
whose bf16 value the step did not move (an update under half a bf16 unit in the last place
is rounded away from the weights the forward reads, though the master keeps it).  A bf16 cost
that the "product weights rounded" float32 forward reproduces is the rounding of the weight
copy (what stochastic rounding of that copy would address), not the bf16 activations.
"""
import argparse

import numpy as np

from .workloads import bf16_training, nanogpt
from .workloads.common import FixedBatch, class_targets

DEFAULT_TEXT = "/work/shared/data/text/tinyshakespeare.txt"


def _batches(text, n, T, seed=0):
    """Two (n, T + 1) windows of the text's character ids (its sorted vocabulary)."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    starts = np.random.default_rng(seed).integers(0, len(text) - T - 1, 2 * n)
    ids = np.array([[index[c] for c in text[s:s + T + 1]] for s in starts])
    return ids.reshape(2, n, T + 1), len(chars)


class _Run:
    """A model of the row's sizes on a new backend storing ``dtype``, weights ``weights``
    (None: its own initialization rounded to bf16)."""

    def __init__(self, dtype, sizes, vocab, weights=None):
        from neonlite import gen_backend
        from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
        from neonlite.layers import GeneralizedCost
        from neonlite.transforms import CrossEntropyMulti
        n, T, d, heads, blocks = sizes
        self.be = gen_backend("cpu", batch_size=n, rng_seed=0, datatype=dtype)
        self.model = nanogpt.neonlite_model(T, d, heads, blocks, vocab=vocab)
        self.model.initialize(FixedBatch((T,), (T, vocab)), GeneralizedCost(CrossEntropyMulti()))
        self.vocab, self.params = vocab, self.model.parameters()
        self.weights = weights or [bf16_to_f32(f32_to_bf16(p.value.get())) for p in self.params]
        for p, w in zip(self.params, self.weights):
            p.value.set(w)

    def step(self, ids, lr):
        from neonlite.optimizers import AdamW
        from neonlite.optimizers.mixed_precision import MixedPrecision
        opt = MixedPrecision(AdamW(lr, weight_decay=0.1), loss_scale=None)
        x, t = self.be.array(ids[:, :-1]), class_targets(self.be, ids[:, 1:], self.vocab)
        self.model.train_step(x, t, opt, 0)
        return [p.states["master"].get() for p in self.params]

    def cost(self, ids, weights=None):
        if weights is not None:
            for p, w in zip(self.params, weights):
                p.value.set(w)
        x, t = self.be.array(ids[:, :-1]), class_targets(self.be, ids[:, 1:], self.vocab)
        y = self.model.layers.fprop(x, inference=True)
        return self.model.cost.cost_and_errors(y, t)[0]


def _is_product_weight(param):
    return len(param.value.shape) == 2 and \
        type(param.layer).__name__ not in ("Embedding", "PositionalEmbedding")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16_first_step",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="gpt512_bf16", choices=["gpt512_bf16", "nanogpt_bf16"])
    parser.add_argument("--lr", type=float, default=bf16_training.GPT512_LR / 50,
                        help="the step's learning rate (default: the example's first warm-up "
                             "step, 6e-4 / 50)")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    args = parser.parse_args(argv)
    from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
    sizes = bf16_training.RECIPES[args.row].sizes(False)
    with open(args.text, encoding="utf-8") as f:
        ids, vocab = _batches(f.read(), sizes[0], sizes[1])
    f32 = _Run("float32", sizes, vocab)
    masters = f32.step(ids[0], args.lr)
    f32_cost = f32.cost(ids[1])
    bf16 = _Run("bfloat16", sizes, vocab, f32.weights)
    bf16.step(ids[0], args.lr)
    bf16_cost = bf16.cost(ids[1])
    rounded = [bf16_to_f32(f32_to_bf16(m.astype(np.float32))) for m in masters]
    products = [_is_product_weight(p) for p in f32.params]
    costs = {"all parameters": rounded,
             "the 2-D product weights only": [r if g else m for r, m, g in
                                              zip(rounded, masters, products)],
             "embeddings, biases and norm gains only": [m if g else r for r, m, g in
                                                        zip(rounded, masters, products)]}
    still = [np.mean(r == w) for r, w, g in zip(rounded, f32.weights, products) if g]
    print(f"{args.row}, one AdamW step at lr {args.lr:g}; the next batch's cost:")
    print(f"  float32 model                          {f32_cost:.4f}")
    print(f"  bf16 model                             {bf16_cost:.4f}")
    for name, weights in costs.items():
        print(f"  float32, masters rounded to bf16: {name:<40} {f32.cost(ids[1], weights):.4f}")
    print(f"  product weights whose bf16 value did not move: {100 * np.mean(still):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
