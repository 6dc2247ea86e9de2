"""The whole-run check of nanoGPT's CPU recipe: ``python -m benchmarks.nanogpt_shakespeare
[--text PATH] [--iters 2000] [--only neonlite|torch]``.

Trains the recipe of :mod:`.workloads.nanogpt` (4 blocks, 4 heads, d=128, context 64, batch
12, AdamW with decay on matrices only, warm-up 100 + cosine to 1e-4, clipping 1.0) for
``iters`` iterations on Tiny Shakespeare (characters; the first 90% trains, the rest
validates), first in neonlite through its public API only (TextCorpus, Model.fit,
Model.eval), then in PyTorch the nanoGPT way, one after the other, each in a process of its
own: run in one process after neonlite, PyTorch's step took twice as long (the two libraries'
OpenMP thread pools compete), which is not the comparison a user makes.  Prints
each one's training wall time and its validation loss (mean cross-entropy in nats per
character over every non-overlapping 64-character window of the validation split, the same
windows for both), and the machine's load average before and after each run."""
import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

from .workloads import nanogpt

DEFAULT_TEXT = "/work/shared/data/text/tinyshakespeare.txt"


def _load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_neonlite(text, iters, seed=0):
    import neonlite
    from neonlite.data import TextCorpus
    from neonlite.layers import GeneralizedCost
    from neonlite.transforms import CrossEntropyMulti, NatsPerToken
    n, T, d, heads, blocks = nanogpt.sizes()
    neonlite.gen_backend("cpu", batch_size=n, rng_seed=seed)
    corpus = TextCorpus(text, seq_len=T, split=0.9, nbatches=iters)
    model = nanogpt.neonlite_model(T, d, heads, blocks, vocab=len(corpus.vocab))
    start = time.perf_counter()
    model.fit(corpus, nanogpt.neonlite_optimizer(), num_epochs=1,
              cost=GeneralizedCost(CrossEntropyMulti()))
    seconds = time.perf_counter() - start
    return seconds, model.eval(corpus.valid_iter, NatsPerToken())


def run_torch(text, iters, seed=0):
    import torch
    from neonlite.data import Vocabulary
    n, T, d, heads, blocks = nanogpt.sizes()
    torch.manual_seed(seed)
    with open(text, encoding="utf-8") as f:
        chars = f.read()
    vocab = Vocabulary.of_text(chars)
    ids = np.asarray(vocab.encode(chars), dtype=np.int64)
    cut = int(len(ids) * 0.9)
    train, valid = torch.from_numpy(ids[:cut]), ids[cut:]
    model = nanogpt.torch_model(T, d, heads, blocks, vocab=len(vocab.chars))
    opt = nanogpt.torch_optimizer(model)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    model.train()
    for step in range(iters):
        starts = torch.randint(len(train) - T, (n,), generator=gen)
        x = torch.stack([train[s:s + T] for s in starts])
        y = torch.stack([train[s + 1:s + T + 1] for s in starts])
        nanogpt.torch_train_step(model, opt, x, y, step)
    seconds = time.perf_counter() - start
    model.eval()
    windows = (len(valid) - 1) // T
    x = torch.from_numpy(valid[:windows * T].reshape(windows, T))
    y = torch.from_numpy(valid[1:windows * T + 1].reshape(windows, T))
    with torch.no_grad():
        losses = [torch.nn.functional.cross_entropy(model(xb).reshape(-1, len(vocab.chars)),
                                                    yb.reshape(-1), reduction="sum")
                  for xb, yb in zip(x.split(64), y.split(64))]
    return seconds, float(sum(losses)) / (windows * T)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--iters", type=int, default=nanogpt.STEPS)
    parser.add_argument("--only", choices=("neonlite", "torch"))
    args = parser.parse_args(argv)
    if args.only is None:
        for name in ("neonlite", "torch"):
            subprocess.run([sys.executable, "-m", __spec__.name, "--text", args.text,
                            "--iters", str(args.iters), "--only", name], check=True)
        return
    for name, run in (("neonlite", run_neonlite), ("torch", run_torch)):
        if args.only != name:
            continue
        before = _load()
        seconds, loss = run(args.text, args.iters)
        print(f"{name:<9} {args.iters} iterations in {seconds:7.1f} s  validation loss "
              f"{loss:.4f} nats/char (perplexity {math.exp(loss):.2f})  load {before} -> "
              f"{_load()}", flush=True)


if __name__ == "__main__":
    main()
