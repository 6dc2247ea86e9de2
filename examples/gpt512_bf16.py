"""Train the d_model-512 character transformer in bfloat16 on the CPU, then write text with it.

The recipe of ``examples/gpt512_bf16.yaml``: 4 pre-norm blocks, d=512, 8 heads, T=128, batch
16, AdamW (lr 6e-4, weight decay 0.1), 50 warm-up steps then cosine decay to 10% of the rate.
``-d bf16`` stores parameters, activations and gradients as bfloat16 and keeps float32 master
weights and optimizer states (README, "bfloat16 on the CPU"); ``-d f32`` is the float32 run.

    python examples/gpt512_bf16.py -d bf16 --steps 300 \
        --data ../shared/data/text/tinyshakespeare.txt

It takes the flags of ``neonlite train examples/gpt512_bf16.yaml`` with their meanings, plus
``--data FILE``, ``--steps``, ``--seq-len``, ``--dropout``, ``--prompt`` and ``-n``.  ``train()``
is the same recipe as a Python function.
"""
import sys

from neonlite import Model
from neonlite.cli.example import example_main
from neonlite.cli.text_examples import (configure_text_lm, text_lm_arguments, train_text_lm,
                                        transformer_optimizer, write_sample)
from neonlite.layers import (Affine, Embedding, GeneralizedCost, LayerNorm, PositionalEmbedding,
                             TransformerBlock)
from neonlite.transforms import CrossEntropyMulti, Softmax

LR = 6e-4


def build_model(vocab_size, seq_len=128, d=512, heads=8, blocks=4, dropout=0.0):
    """Embedding + learned positions, ``blocks`` TransformerBlocks, a final LayerNorm and a
    per-token Affine + Softmax head: (N, T) ids -> (N, T, vocab)."""
    layers = [Embedding(vocab_size, d, name="embed"), PositionalEmbedding(seq_len, d, name="pos")]
    layers += [TransformerBlock(d, heads, dropout=dropout, name=f"block{i}")
               for i in range(blocks)]
    layers += [LayerNorm(name="ln_f"), Affine(vocab_size, activation=Softmax(), name="head")]
    return Model(layers, name="gpt512")


def train(data=None, steps=500, datatype="bf16", backend="cpu", batch_size=16, seed=0,
          seq_len=128, log_every=50, stream=sys.stdout):
    """Train the recipe in ``datatype`` ('bf16' or 'f32'); returns (model, corpus, per-step
    training losses, validation loss in nats per character)."""
    return train_text_lm(lambda vocab: build_model(vocab, seq_len),
                         transformer_optimizer(steps, LR), data, steps, backend, batch_size,
                         seed, seq_len, log_every, stream, datatype=datatype)


SETTINGS = {"backend": "cpu", "epochs": 1, "batchsize": 16, "rng_seed": 0, "eval_freq": 1,
            "metric": {"type": "NatsPerToken"},
            "dataset": {"type": "text", "config": {"seq_len": 128, "split": 0.9,
                                                   "nbatches": 500}}}


def network(vocab_size=103, seq_len=128, dropout=0.0, steps=500):
    """(layers, cost, optimizer) of the recipe, as examples/gpt512_bf16.yaml has them
    (vocabulary 103: Python's documentation text)."""
    model = build_model(vocab_size, seq_len, dropout=dropout)
    return (model.layers.layers, GeneralizedCost(CrossEntropyMulti()),
            transformer_optimizer(steps, LR))


def main(argv=None):
    """``python examples/gpt512_bf16.py [neonlite train's flags] [--data FILE] ...``"""
    return example_main(network, SETTINGS, __doc__, argv, "gpt512_bf16.py",
                        text_lm_arguments(), configure_text_lm(network, SETTINGS),
                        write_sample)


if __name__ == "__main__":
    raise SystemExit(main())
