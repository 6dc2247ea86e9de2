"""Per-call Python cost of small ops on the CPU backend: the time of one call of each op at a
size where the kernel is tiny, best of ``ROUNDS`` loops of ``CALLS`` calls.  Run it before and
after a change to the dispatch path, on the same idle machine, to read its per-call overhead
in microseconds.  To compare two trees of the checkout in turn on one machine, run it once
per tree, alternating, several times.

    python benchmarks/small_op_calls.py [CALLS] [ROUNDS]      (defaults 10000 and 5)
"""
import sys
import time

import numpy as np

import neonlite
from neonlite.blocksparse.layouts import as_layout


def _ops(be, rng):
    """{name: a no-argument call of the op on small kept tensors (``slices``: on per-call
    slices, which no backend keeps a call for)}."""
    arr = lambda *shape: be.array(rng.normal(size=shape))  # noqa: E731
    x, out = arr(8, 16), arr(8, 16)
    q, k, v, o = arr(2, 8, 16), arr(2, 8, 16), arr(2, 8, 16), arr(2, 8, 16)
    lse = arr(2, 8)
    a, b, c = arr(8, 16), arr(16, 8), arr(8, 8)
    plan = be.blocksparse_layer(as_layout(np.ones((1, 2, 2), np.uint8)), 8)
    bx, bw, by = arr(4, 16), arr(plan.nnz, 8, 8), arr(4, 16)
    xs, ys = arr(2, 4, 16), arr(2, 4, 16)
    return {
        "softmax": lambda: be.softmax(x, out),
        "gelu": lambda: be.gelu(x, out),
        "compound_dot": lambda: be.compound_dot(a, b, c),
        "attention": lambda: be.attention(q, k, v, o, lse, 0.25, True),
        "blocksparse_fprop": lambda: be.blocksparse_fprop(plan, bx, bw, by),
        "blocksparse_fprop slices": lambda: be.blocksparse_fprop(plan, xs[1], bw, ys[1]),
    }


def main(calls=10000, rounds=5):
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    ops = _ops(be, np.random.default_rng(0))
    best = dict.fromkeys(ops, float("inf"))
    for call in ops.values():
        call()
    for _ in range(rounds):
        for name, call in ops.items():
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[name] = min(best[name], time.perf_counter() - start)
    for name, seconds in best.items():
        print(f"{name:26s} {seconds / calls * 1e6:8.2f} us per call")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
