"""Train a character-level LSTM language model (neon's char_lstm), then write text with it.

The recipe: a 64-wide character embedding, 2 stacked stateful LSTMs of 512 units (forget-gate
bias 1), a per-character softmax; windows of T=64 characters, batch 32, Adam (lr 2e-3,
gradient norm clipped at 5).  Stateful: the batch rows read 32 stretches of the text in order,
each window continuing the previous one's state (truncated backpropagation through time); the
state returns to zero at each epoch (the ResetState callback).  The first 90% of the text
trains, the last 10% validates.

    python examples/char_lstm.py -b cpu --steps 500 \
        --data ../shared/data/text/tinyshakespeare.txt

Without ``--data`` it trains on Python's own documentation text, so it runs offline.
"""
import argparse
import sys

import numpy as np

from neonlite import Model, available_backends, gen_backend
from neonlite.callbacks import Callbacks, LossLog, ResetState
from neonlite.data import TextCorpus
from neonlite.generation import generate
from neonlite.layers import LSTM, Affine, Embedding, GeneralizedCost
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, NatsPerToken, Softmax


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
    gen_backend(backend, batch_size=batch_size, rng_seed=seed, datatype=datatype)
    corpus = TextCorpus(data, seq_len=seq_len, split=0.9, nbatches=steps, streams=True)
    model = build_model(len(corpus.vocab), hidden, layers)
    log = LossLog(log_every, stream)
    callbacks = Callbacks(model, progress=False)
    callbacks.add(log)
    callbacks.add(ResetState())
    model.initialize(corpus, GeneralizedCost(CrossEntropyMulti()))
    model.layers.layers[0].set_vocabulary(corpus.vocab.chars)
    model.fit(corpus, Adam(lr, gradient_clip_norm=5.0), num_epochs=1, cost=model.cost,
              callbacks=callbacks)
    for leaf in model.layers.leaves():
        if getattr(leaf, "stateful", False):
            leaf.reset_state()
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
    parser.add_argument("--data-dir", default=None, help="a data directory holding "
                        "text/tinyshakespeare.txt (used when --data is not given)")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--prompt", default="\n", help="text to start the sample from")
    parser.add_argument("-n", "--chars", type=int, default=300, help="characters to sample")
    parser.add_argument("--save-path", default=None, help="write a checkpoint here")
    args = parser.parse_args(argv)
    data = args.data
    if data is None and args.data_dir is not None:
        from pathlib import Path
        data = str(Path(args.data_dir) / "text" / "tinyshakespeare.txt")
    model, corpus, _, valid = train(data, args.steps, args.backend, args.batch_size, args.seed,
                                    args.seq_len, args.hidden)
    print(f"validation loss {valid:.4f} nats/char ({valid / np.log(2):.3f} bits/char)")
    print(args.prompt + generate(model, corpus.vocab, args.prompt, args.chars, temperature=0.8,
                                 seed=args.seed))
    if args.save_path:
        model.save(args.save_path)
        print(f"saved {args.save_path}")


if __name__ == "__main__":
    main()
