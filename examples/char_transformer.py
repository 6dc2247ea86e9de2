"""Train a character-level transformer language model, then write text with it.

The recipe: 4 pre-norm blocks, d=128, 4 heads, T=128, batch 32, AdamW (lr 1e-3, weight decay
0.1), 50 warm-up steps then cosine decay to 10% of the rate.  The first 90% of the text trains
(random windows), the last 10% validates.

    python examples/char_transformer.py -b cpu --steps 500 \
        --data ../shared/data/text/tinyshakespeare.txt

It takes the flags of ``neonlite train examples/char_transformer.yaml`` (``-e`` epochs,
``-z``, ``--max-batches``, ``--save-path``, ...) with their meanings, plus ``--data FILE``,
``--steps`` (training batches per epoch and the schedule's length), ``--seq-len``,
``--dropout``, ``--prompt`` and ``-n`` (characters to sample after training).  Without
``--data`` it trains on Python's own documentation text, so it runs offline.  ``train()`` is
the same recipe as a Python function.
"""
import sys

from neonlite import Model
from neonlite.cli.example import example_main
from neonlite.cli.text_examples import (configure_text_lm, text_lm_arguments, train_text_lm,
                                        transformer_optimizer, write_sample)
from neonlite.layers import (Affine, Embedding, GeneralizedCost, LayerNorm, PositionalEmbedding,
                             TransformerBlock)
from neonlite.transforms import CrossEntropyMulti, Softmax


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
    return train_text_lm(lambda vocab: build_model(vocab, seq_len, d, heads, blocks, dropout),
                         transformer_optimizer(steps, lr), data, steps, backend, batch_size,
                         seed, seq_len, log_every, stream)


SETTINGS = {"backend": "cpu", "epochs": 1, "batchsize": 32, "rng_seed": 0, "eval_freq": 1,
            "metric": {"type": "NatsPerToken"},
            "dataset": {"type": "text", "config": {"seq_len": 128, "split": 0.9,
                                                   "nbatches": 500}}}


def network(vocab_size=103, seq_len=128, dropout=0.0, steps=500):
    """(layers, cost, optimizer) of the recipe, as examples/char_transformer.yaml has them
    (vocabulary 103: Python's documentation text)."""
    model = build_model(vocab_size, seq_len, dropout=dropout)
    return model.layers.layers, GeneralizedCost(CrossEntropyMulti()), transformer_optimizer(steps)


def main(argv=None):
    """``python examples/char_transformer.py [neonlite train's flags] [--data FILE] ...``"""
    return example_main(network, SETTINGS, __doc__, argv, "char_transformer.py",
                        text_lm_arguments(), configure_text_lm(network, SETTINGS),
                        write_sample)


if __name__ == "__main__":
    raise SystemExit(main())
