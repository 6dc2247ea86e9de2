"""The optimizer step of ``-d bf16`` against float32's (issue 36): ``python -m
benchmarks.bf16_optimizer_step [--rounds N] [--smoke]``.

The d_model-512 transformer of ``examples/gpt512_bf16.yaml`` (12.7 M parameters) is built
twice in one process, in float32 (its parameter arena, AdamW's fused pass) and in bf16
(``MixedPrecision`` as ``neonlite train -d bf16`` wraps AdamW: float32 masters linked to the
bf16 parameters, one fused pass reading the bf16 gradients and writing the bf16 weights), with
random gradients.  Each round times, in turn, one ``zero_grads`` + optimizer step of float32,
of bf16 with stochastic copies (the recipe's default) and of bf16 rounded to nearest; the
table gives each contender's median and its ratio to float32's (the issue's goal: the bf16
optimizer row plus zero grads at most 1.2x float32's).  Timings of a shared machine are ratios
only: the load average is printed around the run.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

from .workloads import bf16_training, nanogpt
from .workloads.common import FixedBatch

GOAL = 1.2


def _contender(datatype, rounding, smoke):
    """(step callable, parameter count) of one contender: zero grads then AdamW."""
    import neonlite
    from neonlite.layers import GeneralizedCost
    from neonlite.optimizers.mixed_precision import for_datatype
    from neonlite.cli.text_examples import transformer_optimizer
    from neonlite.transforms import CrossEntropyMulti
    n, T, d, heads, blocks = bf16_training.gpt512_sizes(smoke)
    neonlite.gen_backend("cpu", batch_size=n, rng_seed=0,
                         datatype="bfloat16" if datatype == "bf16" else np.float32)
    model = nanogpt.neonlite_model(T, d, heads, blocks, vocab=bf16_training.VOCAB)
    model.initialize(FixedBatch((T,), (T, bf16_training.VOCAB)),
                     GeneralizedCost(CrossEntropyMulti()))
    rng = np.random.default_rng(0)
    params = model.parameters()
    grads = [rng.normal(scale=0.01, size=p.grad.shape) for p in params]
    optimizer = for_datatype(transformer_optimizer(500, bf16_training.GPT512_LR), datatype,
                             rounding)

    def timed():
        # zero grads is timed with the step; refilling the gradients is not
        model.zero_grads()
        for p, g in zip(params, grads):
            p.grad.set(g)
        begin = time.perf_counter()
        model.zero_grads()
        optimizer.optimize(params, 0)
        return time.perf_counter() - begin
    return timed, sum(p.value.size for p in params)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16_optimizer_step",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    args = parser.parse_args(argv)
    contenders = {"f32": _contender("f32", None, args.smoke),
                  "bf16 stochastic": _contender("bf16", "stochastic", args.smoke),
                  "bf16 nearest": _contender("bf16", "nearest", args.smoke)}
    times = {name: [] for name in contenders}
    load_before = os.getloadavg()
    for r in range(args.warmup + args.rounds):
        names = list(contenders)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            seconds = contenders[name][0]()
            if r >= args.warmup:
                times[name].append(seconds)
    base = statistics.median(times["f32"])
    print(f"zero grads + AdamW step, gpt512 ({contenders['f32'][1] / 1e6:.1f} M parameters), "
          f"median of {args.rounds} alternating rounds; load average "
          f"{load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<16} {median * 1e3:8.2f} ms   {median / base:5.2f}x f32"
              + ("" if name == "f32" else f"  (goal <= {GOAL}x)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
