"""Train the character transformer with block-sparse attention and block-sparse MLP weights,
then write text with it (the Python twin of examples/blocksparse_transformer.yaml).

The recipe of examples/char_transformer.py (4 pre-norm blocks, d=128, 4 heads, T=128, batch 32,
AdamW lr 1e-3 with weight decay 0.1, 50 warm-up steps then cosine decay to 10%) with, in every
block, attention over a causal local + strided layout of 16-token blocks (each query block sees
its own and the previous block plus every 4th block before it) and fc1 / fc2 holding 25% of their
16 x 16 weight blocks (a balanced random layout per layer: every block row and column keeps
weights).

    python examples/blocksparse_transformer.py -b cpu --steps 500 \\
        --data ../shared/data/text/tinyshakespeare.txt

Without ``--data`` it trains on Python's own documentation text, so it runs offline.
"""
import argparse
import sys

import numpy as np

from neonlite import Model, available_backends, gen_backend
from neonlite.callbacks import Callbacks, LossLog
from neonlite.data import TextCorpus
from neonlite.generation import generate
from neonlite.layers import (Affine, BlockSparseAffine, BlockSparseAttention, Embedding,
                             GeneralizedCost, LayerNorm, PositionalEmbedding, TransformerBlock)
from neonlite.optimizers import AdamW, CosineSchedule
from neonlite.transforms import CrossEntropyMulti, NatsPerToken, Softmax

#: the attention layout: causal local window of 2 blocks plus every 4th block (YAML form)
ATTENTION_LAYOUT = {"local": {"window": 2, "causal": True}, "strided": {"stride": 4,
                                                                        "causal": True}}
ATTENTION_BLOCK = 16
MLP_DENSITY, MLP_BLOCK = 0.25, 16


def build_model(vocab_size, seq_len=128, d=128, heads=4, blocks=4, mlp_ratio=4):
    """Embedding + learned positions, ``blocks`` block-sparse TransformerBlocks, a final
    LayerNorm and a per-token Affine + Softmax head: (N, T) ids -> (N, T, vocab)."""
    layers = [Embedding(vocab_size, d, name="embed"), PositionalEmbedding(seq_len, d, name="pos")]
    for i in range(blocks):
        attention = BlockSparseAttention(heads, ATTENTION_LAYOUT, ATTENTION_BLOCK, causal=True)
        fc1 = BlockSparseAffine(mlp_ratio * d, {"balanced": {"density": MLP_DENSITY,
                                                             "seed": 2 * i}}, MLP_BLOCK)
        fc2 = BlockSparseAffine(d, {"balanced": {"density": MLP_DENSITY, "seed": 2 * i + 1}},
                                MLP_BLOCK)
        layers.append(TransformerBlock(d, heads, attention=attention, fc1=fc1, fc2=fc2,
                                       name=f"block{i}"))
    layers += [LayerNorm(name="ln_f"), Affine(vocab_size, activation=Softmax(), name="head")]
    return Model(layers, name="blocksparse_transformer")


def train(data=None, steps=500, backend="cpu", batch_size=32, seed=0, seq_len=128, d=128,
          heads=4, blocks=4, lr=1e-3, log_every=50, stream=sys.stdout):
    """Train the recipe; returns (model, corpus, per-step training losses, validation loss in
    nats per character)."""
    gen_backend(backend, batch_size=batch_size, rng_seed=seed)
    corpus = TextCorpus(data, seq_len=seq_len, split=0.9, nbatches=steps)
    model = build_model(len(corpus.vocab), seq_len, d, heads, blocks)
    optimizer = AdamW(lr, weight_decay=0.1,
                      schedule=CosineSchedule(steps, warmup_steps=min(50, steps - 1),
                                              min_ratio=0.1))
    log = LossLog(log_every, stream)
    callbacks = Callbacks(model, progress=False)
    callbacks.add(log)
    model.initialize(corpus, GeneralizedCost(CrossEntropyMulti()))
    model.layers.layers[0].set_vocabulary(corpus.vocab.chars)
    model.fit(corpus, optimizer, num_epochs=1, cost=model.cost, callbacks=callbacks)
    valid = model.eval(corpus.valid_iter, NatsPerToken())
    return model, corpus, log.losses, valid


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--backend", default="cpu", choices=available_backends())
    parser.add_argument("-e", "--steps", type=int, default=500, help="training steps")
    parser.add_argument("-z", "--batch-size", type=int, default=32)
    parser.add_argument("-r", "--seed", type=int, default=0)
    parser.add_argument("--data", default=None, help="a UTF-8 text file (default: Python's "
                        "documentation text)")
    parser.add_argument("--seq-len", type=int, default=128,
                        help=f"window length, a multiple of {ATTENTION_BLOCK}")
    parser.add_argument("--prompt", default="\n", help="text to start the sample from")
    parser.add_argument("-n", "--chars", type=int, default=300, help="characters to sample")
    parser.add_argument("--save-path", default=None, help="write a checkpoint here")
    args = parser.parse_args(argv)
    model, corpus, _, valid = train(args.data, args.steps, args.backend, args.batch_size,
                                    args.seed, args.seq_len)
    print(f"validation loss {valid:.4f} nats/char ({valid / np.log(2):.3f} bits/char)")
    print(args.prompt + generate(model, corpus.vocab, args.prompt, args.chars, temperature=0.8,
                                 seed=args.seed))
    if args.save_path:
        model.save(args.save_path)
        print(f"saved {args.save_path}")


if __name__ == "__main__":
    main()
