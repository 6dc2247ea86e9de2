"""The profiler's cost on the suite's training-step workloads: ``python -m
benchmarks.profiler_overhead [--only lenet_train,char_lm_train] [--repeats N] [--smoke]``.

Per workload, three copies of the same step (each its own model and backend object, built by
the workload's ``neonlite()``), timed alternating call by call after warm-up (medians):

- ``plain``: never profiled;
- ``after``: profiled for a few steps, then detached (the wrappers came off: this is the
  "profiling off" cost, which must be nil);
- ``profiled``: every call inside an open profile window (the instance wrappers on, every
  layer, op, cost and optimizer call recorded).

The ratios after/plain and profiled/plain are printed; > 1 is slower.
"""
import argparse
import sys

import numpy as np

from .timing import time_alternating
from .workloads import WORKLOADS


def _parts(step):
    """The model and optimizer a workload's ``step`` closure trains (its free variables)."""
    cells = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))
    if "model" not in cells or "opt" not in cells:
        raise RuntimeError(f"the workload's step closure has {sorted(cells)}, expected "
                           f"'model' and 'opt'")
    return cells["model"], cells["opt"]


def _make(module, smoke):
    from neonlite import gen_backend

    def backend(batch):
        return gen_backend("cpu", batch_size=batch, rng_seed=0, datatype=np.float32)
    step, work = module.neonlite(backend, smoke)
    return step, work


def contenders(module, smoke):
    """name -> step callable, and the work per step."""
    from neonlite.profiler.instrument import Instrumentation
    from neonlite.profiler.recorder import Recorder
    plain, work = _make(module, smoke)
    after, _ = _make(module, smoke)
    model, opt = _parts(after)
    trial = Instrumentation(Recorder())
    trial.attach(model, opt)
    for _ in range(2):
        after()
    trial.detach()
    profiled, _ = _make(module, smoke)
    model, opt = _parts(profiled)
    recorder = Recorder()
    Instrumentation(recorder).attach(model, opt)

    def recorded():
        profiled()
        if len(recorder.spans) > 20000:     # keep memory flat over long runs
            recorder.spans.clear()
    return {"plain": plain, "after": after, "profiled": recorded}, work


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiler_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="lenet_train,char_lm_train")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    print(f"{'workload':<16}{'plain ms':>10}{'after ms':>10}{'profiled ms':>13}"
          f"{'after/plain':>13}{'profiled/plain':>16}")
    for name in args.only.split(","):
        steps, _ = contenders(WORKLOADS[name], args.smoke)
        medians = time_alternating(steps, args.repeats, warmup=1 if args.smoke else 3)
        p, a, r = (1e3 * medians[k] for k in ("plain", "after", "profiled"))
        print(f"{name:<16}{p:10.2f}{a:10.2f}{r:13.2f}{a / p:13.3f}{r / p:16.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
