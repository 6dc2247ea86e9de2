"""Train a character-level transformer language model, then write text with it.

The recipe: 4 pre-norm blocks, d=128, 4 heads, T=128, batch 32, AdamW (lr 1e-3, weight decay
0.1), 50 warm-up steps then cosine decay to 10% of the rate.  The first 90% of the text trains
(random windows), the last 10% validates.

    python examples/char_transformer.py -b cpu --steps 500 \
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
from neonlite.layers import (Affine, Embedding, GeneralizedCost, LayerNorm, PositionalEmbedding,
                             TransformerBlock)
from neonlite.optimizers import AdamW, CosineSchedule
from neonlite.transforms import CrossEntropyMulti, NatsPerToken, Softmax


def build_model(vocab_size, seq_len=128, d=128, heads=4, blocks=4, dropout=0.0):
    """Embedding + learned positions, ``blocks`` TransformerBlocks, a final LayerNorm and a
    per-token Affine + Softmax head over the vocabulary: (N, T) ids -> (N, T, vocab)."""
    layers = [Embedding(vocab_size, d, name="embed"), PositionalEmbedding(seq_len, d, name="pos")]
    layers += [TransformerBlock(d, heads, dropout=dropout, name=f"block{i}")
               for i in range(blocks)]
    layers += [LayerNorm(name="ln_f"), Affine(vocab_size, activation=Softmax(), name="head")]
    return Model(layers, name="char_transformer")


def train(data=None, steps=500, backend="cpu", batch_size=32, seed=0, seq_len=128, d=128,
          heads=4, blocks=4, dropout=0.0, lr=1e-3, log_every=50, stream=sys.stdout):
    """Train the recipe; returns (model, corpus, per-step training losses, validation loss in
    nats per character)."""
    gen_backend(backend, batch_size=batch_size, rng_seed=seed)
    corpus = TextCorpus(data, seq_len=seq_len, split=0.9, nbatches=steps)
    model = build_model(len(corpus.vocab), seq_len, d, heads, blocks, dropout)
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
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--prompt", default="\n", help="text to start the sample from")
    parser.add_argument("-n", "--chars", type=int, default=300, help="characters to sample")
    parser.add_argument("--save-path", default=None, help="write a checkpoint here")
    args = parser.parse_args(argv)
    model, corpus, _, valid = train(args.data, args.steps, args.backend, args.batch_size,
                                    args.seed, args.seq_len, dropout=args.dropout)
    print(f"validation loss {valid:.4f} nats/char ({valid / np.log(2):.3f} bits/char)")
    print(args.prompt + generate(model, corpus.vocab, args.prompt, args.chars, temperature=0.8,
                                 seed=args.seed))
    if args.save_path:
        model.save(args.save_path)
        print(f"saved {args.save_path}")


if __name__ == "__main__":
    main()
