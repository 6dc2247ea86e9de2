"""LeNet's convolution, pooling and batch-norm passes on ``-d bf16`` against float32, pass by
pass: ``python -m benchmarks.bf16_conv_passes [--rounds N] [--threads T] [--smoke]``.

The shapes of the ``lenet_bf16`` row (:mod:`.workloads.lenet`, batch 128): the first
convolution (5x5, 1 -> 32 channels, padding 2, bias and ReLU fused) forward and weight
gradient, 2x2 max pooling forward and backward, the second convolution (5x5, 32 -> 64)
forward, data gradient and weight gradient, batch norm's training forward (ReLU fused) and
backward (masked by its output).  One backend stores bf16, one float32, on the same values;
each round runs every pass once on each (a warm-up call first, the order alternating round
by round) and the table gives the median ms of each and the median of the per-round ratios
bf16 / float32, with the load average around the run (figures taken on a busy machine say
so).  ``--smoke``: batch 4, two rounds.
"""
import argparse
import os
import time

import numpy as np

BATCH = 128


def passes(be, n):
    """{name: call} of the passes on backend ``be`` for a batch of ``n`` (normal values)."""
    rng = np.random.default_rng(0)

    def make(*shape):
        return be.array(rng.standard_normal(shape).astype(np.float32))
    c1 = be.conv_layer(n, 1, 28, 28, 32, 5, 5, pad=(2, 2))
    c2 = be.conv_layer(n, 32, 14, 14, 64, 5, 5, pad=(2, 2))
    pool = be.pool_layer("max", n, 32, 28, 28, 2, 2)
    x1, f1, o1, b1, df1 = make(n, 28, 28, 1), make(5, 5, 1, 32), make(n, 28, 28, 32), \
        make(32), make(5, 5, 1, 32)
    y1 = make(n, 14, 14, 32)
    x2, f2, o2, dx2, df2 = make(n, 14, 14, 32), make(5, 5, 32, 64), make(n, 14, 14, 64), \
        make(n, 14, 14, 32), make(5, 5, 32, 64)
    rows = n * 14 * 14
    x, y, xhat, dy, dx = (make(rows, 64) for _ in range(5))
    gamma, beta, mean, invstd, rmean, dgamma, dbeta = (make(1, 64) for _ in range(7))
    rvar = be.array(np.ones((1, 64), np.float32))
    return {
        "conv1 fprop": lambda: be.fprop_conv(c1, x1, f1, o1, bias=b1, relu=True),
        "conv1 update": lambda: be.update_conv(c1, x1, o1, df1, beta=1.0),
        "pool1 fprop": lambda: be.fprop_pool(pool, o1, y1),
        "pool1 bprop": lambda: be.bprop_pool(pool, y1, o1),
        "conv2 fprop": lambda: be.fprop_conv(c2, x2, f2, o2),
        "conv2 bprop": lambda: be.bprop_conv(c2, f2, o2, dx2),
        "conv2 update": lambda: be.update_conv(c2, x2, o2, df2, beta=1.0),
        "bn fprop": lambda: be.batchnorm_fprop(x, gamma, beta, y, xhat, mean, invstd, rmean,
                                               rvar, 1e-5, 0.9, False, relu=True),
        "bn bprop": lambda: be.batchnorm_bprop(dy, xhat, invstd, gamma, dx, dgamma, dbeta,
                                               y=y),
    }


def time_passes(rounds, n, threads=None):
    """{name: (bf16 ms, float32 ms, median ratio)} over ``rounds`` alternating rounds."""
    from neonlite import gen_backend
    sides = []
    for datatype in ("bf16", None):
        be = gen_backend("cpu", batch_size=n, **({"datatype": datatype} if datatype else {}))
        if threads:
            be.set_threads(threads)
        sides.append(passes(be, n))
    times = {name: ([], []) for name in sides[0]}
    for r in range(rounds):
        for name in times:
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                call = sides[side][name]
                call()
                start = time.perf_counter()
                call()
                times[name][side].append(time.perf_counter() - start)
    return {name: (1e3 * float(np.median(a)), 1e3 * float(np.median(b)),
                   float(np.median(np.array(a) / np.array(b))))
            for name, (a, b) in times.items()}


def format_table(result, load):
    lines = [f"{'pass':14s} {'bf16 ms':>9s} {'f32 ms':>9s} {'bf16/f32':>9s}"]
    lines += [f"{name:14s} {a:9.2f} {b:9.2f} {ratio:9.2f}x"
              for name, (a, b, ratio) in result.items()]
    lines.append(f"load average {load[0]:.2f} -> {load[1]:.2f}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16_conv_passes",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, help="OpenMP threads (default: all cores)")
    parser.add_argument("--smoke", action="store_true", help="batch 4, two rounds")
    args = parser.parse_args(argv)
    before = os.getloadavg()[0]
    result = time_passes(2 if args.smoke else args.rounds, 4 if args.smoke else BATCH,
                         args.threads)
    print(format_table(result, (before, os.getloadavg()[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
