"""The row ops of a transformer's training step on bf16 storage against float32, one call each:
layer norm and RMSNorm forward and backward (with a pre-norm block's residual joined), the
embedding gather and its gradient, a bias add and the bias gradient (``ones @ dY``), a
positional block added and its gradient (``ones @ dY`` over the batch), softmax and softmax
with cross-entropy (class-index targets).  Sizes: ``gpt512`` (``examples/gpt512_bf16.yaml``:
16 x 128 tokens, d 512, a vocabulary of 96) or ``nanogpt`` (nanoGPT's CPU recipe,
``benchmarks/workloads/nanogpt.py``: 12 x 64 tokens, d 128, 65 classes).  Each op runs on a
``-d bf16`` backend and a ``-d f32`` one, alternating (``timing.time_alternating``), medians;
the table gives milliseconds per call and bf16 / f32.  ``--threads N`` sets the OpenMP
threads (and OpenBLAS's) of both.

    python -m benchmarks.bf16_row_ops [--sizes gpt512|nanogpt] [--threads N] [--repeats R]
                                      [OP ...]
"""
import argparse

import numpy as np

import neonlite
from neonlite.backends.cpu.threads import set_cpu_threads
from .timing import time_alternating

#: (batch N, tokens T, width D, classes) of each model
SIZES = {"gpt512": (16, 128, 512, 96), "nanogpt": (12, 64, 128, 65)}


def _calls(be, N, T, D, VOCAB):
    """{name: a no-argument call of the op on ``be``'s tensors}."""
    rng = np.random.default_rng(0)
    M = N * T
    arr = lambda *shape: be.array(rng.normal(size=shape).astype(np.float32))  # noqa: E731
    x, res, y, xhat, total = arr(M, D), arr(M, D), arr(M, D), arr(M, D), arr(M, D)
    dy, dx = arr(M, D), arr(M, D)
    gamma, beta, dgamma, dbeta = arr(1, D), arr(1, D), arr(1, D), arr(1, D)
    invstd = be.ones((M, 1))
    table, grad_table = arr(VOCAB, D), arr(VOCAB, D)
    ids = be.array(rng.integers(0, VOCAB, size=(M, 1)), dtype=np.int32)
    logits, probs, dlogits = arr(M, VOCAB), arr(M, VOCAB), arr(M, VOCAB)
    targets = be.array(rng.integers(0, VOCAB, size=(M,)), dtype=np.int32)
    bias, dbias, ones = arr(VOCAB), be.zeros((1, VOCAB)), be.ones((1, M))
    positions, dpositions, batch_ones = arr(T, D), be.zeros((1, T * D)), be.ones((1, N))
    tokens, added = x.reshape(N, T, D), y.reshape(N, T, D)
    return {
        "layernorm_fprop": lambda: be.layernorm_fprop(x, gamma, beta, y, xhat, invstd, 1e-5,
                                                      residual=res, total=total),
        "layernorm_bprop": lambda: be.layernorm_bprop(dy, xhat, invstd, gamma, dx, dgamma,
                                                      dbeta, res),
        "rmsnorm_fprop": lambda: be.rmsnorm_fprop(x, gamma, y, xhat, invstd, 1e-5,
                                                  residual=res, total=total),
        "rmsnorm_bprop": lambda: be.rmsnorm_bprop(dy, xhat, invstd, gamma, dx, dgamma, res),
        "take_rows": lambda: be.take_rows(table, ids, y),
        "scatter_add_rows": lambda: be.scatter_add_rows(grad_table, ids, dy),
        "bias_add": lambda: logits.__setitem__(slice(None), probs + bias),
        "bias_grad": lambda: be.compound_dot(ones, dlogits, dbias, beta=1.0),
        "positions_add": lambda: added.__setitem__(slice(None), tokens + positions),
        "positions_grad": lambda: be.compound_dot(batch_ones, dy.reshape(N, T * D), dpositions,
                                                  beta=1.0),
        "softmax": lambda: be.softmax(logits, probs),
        "softmax_cross_entropy": lambda: be.softmax_cross_entropy(logits, targets, probs,
                                                                  dlogits),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", choices=sorted(SIZES), default="gpt512")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("ops", nargs="*")
    args = parser.parse_args(argv)
    if args.threads is not None:
        set_cpu_threads(args.threads)
    N = SIZES[args.sizes][0]
    backends = {name: neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=name)
                for name in ("bf16", "float32")}
    calls = {name: _calls(be, *SIZES[args.sizes]) for name, be in backends.items()}
    print(f"{args.sizes}, threads {args.threads or 'default'}, median of {args.repeats}")
    print(f"{'op':24s} {'bf16 ms':>9s} {'f32 ms':>9s} {'bf16/f32':>9s}")
    for op in calls["float32"]:
        if args.ops and op not in args.ops:
            continue
        medians = time_alternating({name: calls[name][op] for name in calls}, args.repeats)
        print(f"{op:24s} {medians['bf16'] * 1e3:9.3f} {medians['float32'] * 1e3:9.3f} "
              f"{medians['bf16'] / medians['float32']:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
