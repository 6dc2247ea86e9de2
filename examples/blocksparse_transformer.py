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

It takes the flags of ``neonlite train examples/blocksparse_transformer.yaml`` (``-e`` epochs,
``-z``, ``--max-batches``, ``--save-path``, ...) with their meanings, plus ``--data FILE``,
``--steps``, ``--seq-len``, ``--prompt`` and ``-n`` (see examples/char_transformer.py).
Without ``--data`` it trains on Python's own documentation text, so it runs offline.
"""
import sys

from neonlite import Model
from neonlite.cli.example import example_main
from neonlite.cli.text_examples import (configure_text_lm, text_lm_arguments, train_text_lm,
                                        transformer_optimizer, write_sample)
from neonlite.layers import (Affine, BlockSparseAffine, BlockSparseAttention, Embedding,
                             GeneralizedCost, LayerNorm, PositionalEmbedding, TransformerBlock)
from neonlite.transforms import CrossEntropyMulti, Softmax

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
    return train_text_lm(lambda vocab: build_model(vocab, seq_len, d, heads, blocks),
                         transformer_optimizer(steps, lr), data, steps, backend, batch_size,
                         seed, seq_len, log_every, stream)


SETTINGS = {"backend": "cpu", "epochs": 1, "batchsize": 32, "rng_seed": 0, "eval_freq": 1,
            "metric": {"type": "NatsPerToken"},
            "dataset": {"type": "text", "config": {"seq_len": 128, "split": 0.9,
                                                   "nbatches": 500}}}


def network(vocab_size=103, seq_len=128, steps=500):
    """(layers, cost, optimizer) of the recipe, as examples/blocksparse_transformer.yaml has
    them (vocabulary 103: Python's documentation text)."""
    model = build_model(vocab_size, seq_len)
    return model.layers.layers, GeneralizedCost(CrossEntropyMulti()), transformer_optimizer(steps)


def main(argv=None):
    """``python examples/blocksparse_transformer.py [neonlite train's flags] [--data FILE]``"""
    arguments = text_lm_arguments(dropout=False, seq_len_help=f"window length, a multiple of "
                                  f"{ATTENTION_BLOCK} (default 128)")
    return example_main(network, SETTINGS, __doc__, argv, "blocksparse_transformer.py",
                        arguments, configure_text_lm(network, SETTINGS), write_sample)


if __name__ == "__main__":
    raise SystemExit(main())
