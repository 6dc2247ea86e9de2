"""Per-call Python cost of small ops on the CPU backend (the Python between a layer's call and
the C kernel): the time of one call of each op at a size where the kernel is a few
microseconds, best of ``ROUNDS`` loops of ``CALLS`` calls (on a shared machine the best loop
is the one no other process interrupted).  Run it before and after a change to the dispatch
path, on the same idle machine, to read its per-call overhead in microseconds; to compare two
trees of the checkout, run it once per tree, alternating, several times.

    python benchmarks/small_op_calls.py [CALLS] [ROUNDS]      (defaults 2000 and 20)
"""
import sys
import time

import numpy as np

import neonlite
from neonlite.blocksparse.layouts import as_layout

M, D = 8, 64


def _ops(be, rng):
    """{name: a no-argument call of the op on small kept tensors (``slices``: on per-call
    slices, which no backend keeps a call for)}."""
    arr = lambda *shape: be.array(rng.normal(size=shape))  # noqa: E731
    x, out, dy, dx = arr(M, D), arr(M, D), arr(M, D), arr(M, D)
    gamma, beta, dgamma, dbeta = arr(1, D), arr(1, D), arr(1, D), arr(1, D)
    xhat, invstd = be.zeros((M, D)), be.ones((M, 1))
    bias, dbias, pre = arr(D), be.zeros((D,)), be.zeros((M, D))
    pool = be.pool_layer("max", 2, 8, 8, 8, 2, 2)
    image, pooled = arr(2, 8, 8, 8), be.zeros((2, 4, 4, 8))
    q, k, v, o = arr(2, 8, 16), arr(2, 8, 16), arr(2, 8, 16), arr(2, 8, 16)
    lse = arr(2, 8)
    a, b, c = arr(8, 16), arr(16, 8), arr(8, 8)
    plan = be.blocksparse_layer(as_layout(np.ones((1, 2, 2), np.uint8)), 8)
    bx, bw, by = arr(4, 16), arr(plan.nnz, 8, 8), arr(4, 16)
    xs, ys = arr(2, 4, 16), arr(2, 4, 16)
    return {
        "softmax": lambda: be.softmax(x, out),
        "gelu": lambda: be.gelu(x, out, bias, pre),
        "gelu_bprop": lambda: be.gelu_bprop(pre, dy, dx, dbias),
        "layernorm_fprop": lambda: be.layernorm_fprop(x, gamma, beta, out, xhat, invstd),
        "layernorm_bprop": lambda: be.layernorm_bprop(dy, xhat, invstd, gamma, dx, dgamma,
                                                      dbeta),
        "fprop_pool": lambda: be.fprop_pool(pool, image, pooled),
        "compound_dot": lambda: be.compound_dot(a, b, c),
        "attention": lambda: be.attention(q, k, v, o, lse, 0.25, True),
        "blocksparse_fprop": lambda: be.blocksparse_fprop(plan, bx, bw, by),
        "blocksparse_fprop slices": lambda: be.blocksparse_fprop(plan, xs[1], bw, ys[1]),
    }


def main(calls=2000, rounds=20):
    be = neonlite.gen_backend("cpu", batch_size=M, rng_seed=0)
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
