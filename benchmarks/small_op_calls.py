"""Per-call cost of small CPU ops (the Python between a layer's call and the C kernel): the
best of ``ROUNDS`` batches of ``CALLS`` calls each (short batches: on a shared machine the
best one is the one no other process interrupted) of softmax, GELU (forward and backward),
layer norm (forward and backward) and max pooling on tensors small enough that the kernel
itself is a few microseconds.  Run it on two commits on the same idle machine to see what a
change of the dispatch path costs per call.

    python benchmarks/small_op_calls.py [CALLS] [ROUNDS]      (default 200 200)
"""
import sys
import time

import numpy as np

import neonlite

M, D = 8, 64


def _calls(be):
    """{op name: a function making one call} on tensors made once."""
    rng = np.random.default_rng(0)
    x, out, dy, dx = (be.array(rng.normal(size=(M, D))) for _ in range(4))
    gamma, beta, dgamma, dbeta = (be.array(rng.normal(size=(1, D))) for _ in range(4))
    xhat, invstd = be.zeros((M, D)), be.ones((M, 1))
    bias, dbias, pre = be.array(rng.normal(size=(D,))), be.zeros((D,)), be.zeros((M, D))
    plan = be.pool_layer("max", 2, 8, 8, 8, 2, 2)
    image, pooled = be.array(rng.normal(size=(2, 8, 8, 8))), be.zeros((2, 4, 4, 8))
    return {
        "softmax": lambda: be.softmax(x, out),
        "gelu": lambda: be.gelu(x, out, bias, pre),
        "gelu_bprop": lambda: be.gelu_bprop(pre, dy, dx, dbias),
        "layernorm_fprop": lambda: be.layernorm_fprop(x, gamma, beta, out, xhat, invstd),
        "layernorm_bprop": lambda: be.layernorm_bprop(dy, xhat, invstd, gamma, dx, dgamma,
                                                      dbeta),
        "fprop_pool": lambda: be.fprop_pool(plan, image, pooled),
    }


def main(calls=200, rounds=200):
    be = neonlite.gen_backend("cpu", batch_size=M, rng_seed=0)
    for name, call in _calls(be).items():
        call()
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best = min(best, time.perf_counter() - start)
        print(f"{name:16s} {best / calls * 1e6:8.2f} us per call")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
