"""Train a character-level LSTM language model (neon's char_lstm), then write text with it.

The recipe: a 64-wide character embedding, 2 stacked stateful LSTMs of 512 units (forget-gate
bias 1), a per-character softmax; windows of T=64 characters, batch 32, Adam (lr 2e-3,
gradient norm clipped at 5).  Stateful: the batch rows read 32 stretches of the text in order,
each window continuing the previous one's state (truncated backpropagation through time); the
state returns to zero at each epoch (the ResetState callback).  The first 90% of the text
trains, the last 10% validates.

    python examples/char_lstm.py -b cpu --steps 500 \
        --data ../shared/data/text/tinyshakespeare.txt

It takes the flags of ``neonlite train examples/char_lstm.yaml`` (``-e`` epochs, ``-z``,
``--max-batches``, ``--save-path``, ``--data-dir`` ...) with their meanings, plus ``--data
FILE``, ``--steps`` (training batches per epoch), ``--seq-len``, ``--hidden``, ``--prompt`` and
``-n`` (characters to sample after training).  Without ``--data`` it trains on Python's own
documentation text, so it runs offline.  ``train()`` is the same recipe as a Python function.
"""
import functools
import sys

import numpy as np

from neonlite import Model
from neonlite.callbacks import ResetState
from neonlite.cli.arguments import positive_int
from neonlite.cli.example import example_main
from neonlite.cli.text_examples import (configure_text_lm, text_lm_arguments, train_text_lm,
                                        write_sample)
from neonlite.layers import LSTM, Affine, Embedding, GeneralizedCost
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Softmax


def build_model(vocab_size, hidden=512, layers=2, d=64):
    """Embedding (vocab, d), ``layers`` stateful LSTMs of ``hidden`` units and a per-token
    Affine + Softmax head: (N, T) ids -> (N, T, vocab)."""
    stack = [Embedding(vocab_size, d, name="embed")]
    stack += [LSTM(hidden, forget_bias=1.0, stateful=True, name=f"lstm{i}")
              for i in range(layers)]
    stack += [Affine(vocab_size, activation=Softmax(), name="head")]
    return Model(stack, name="char_lstm")


def train(data=None, steps=500, backend="cpu", batch_size=32, seed=0, seq_len=64, hidden=512,
          layers=2, lr=2e-3, log_every=50, stream=sys.stdout, datatype=np.float32):
    """Train the recipe; returns (model, corpus, per-step training losses, validation loss in
    nats per character)."""
    return train_text_lm(lambda vocab: build_model(vocab, hidden, layers),
                         Adam(lr, gradient_clip_norm=5.0), data, steps, backend, batch_size,
                         seed, seq_len, log_every, stream, datatype=datatype, streams=True,
                         callbacks=[ResetState()])


SETTINGS = {"backend": "cpu", "epochs": 1, "batchsize": 32, "rng_seed": 0, "eval_freq": 1,
            "metric": {"type": "NatsPerToken"},
            "dataset": {"type": "text", "config": {"seq_len": 64, "split": 0.9,
                                                   "nbatches": 500, "streams": True}},
            "callbacks": [{"type": "ResetState"}]}


def network(vocab_size=103, seq_len=64, steps=500, hidden=512):
    """(layers, cost, optimizer) of the recipe, as examples/char_lstm.yaml has them
    (vocabulary 103: Python's documentation text; ``seq_len`` and ``steps`` are the data
    set's and do not change the network)."""
    model = build_model(vocab_size, hidden)
    return (model.layers.layers, GeneralizedCost(CrossEntropyMulti()),
            Adam(2e-3, gradient_clip_norm=5.0))


def lstm_arguments(group):
    """``add_arguments`` hook: the text twins' options (window 64 by default) and --hidden."""
    text_lm_arguments(dropout=False, seq_len=64)(group)
    group.add_argument("--hidden", type=positive_int, default=512, metavar="H",
                       help="units of each LSTM (default 512)")


def configure(args):
    """``configure`` hook: the recipe's network for the text, window and --hidden chosen."""
    return configure_text_lm(functools.partial(network, hidden=args.hidden), SETTINGS)(args)


def main(argv=None):
    """``python examples/char_lstm.py [neonlite train's flags] [--data FILE] [--hidden H] ...``"""
    return example_main(network, SETTINGS, __doc__, argv, "char_lstm.py", lstm_arguments,
                        configure, write_sample)


if __name__ == "__main__":
    raise SystemExit(main())
