"""What the model's inference lock costs a training step: ``python -m
benchmarks.inference_lock_overhead [--only nanogpt_cpu] [--repeats N] [--smoke]``.

``Model.predict`` / ``get_outputs`` / ``eval`` / ``generate`` hold ``Model.inference_lock`` so
threads sharing a model take turns; ``train_step`` and ``fit`` take no lock, so the step pays
nothing.  This measures the one per-step cost there would be (and that a user pays who holds
the lock around training to run inference from other threads meanwhile): the same step of the
same model, timed alternating call by call after warm-up (medians),

- ``plain``: ``model.train_step(...)`` as ``fit`` runs it;
- ``locked``: the same call inside ``with model.inference_lock:``.

The ratio locked/plain is printed (> 1: slower); the target is under 1.01.  Run it on an idle
machine: the lock is an uncontended reentrant lock, about a tenth of a microsecond, against a
step of tens of milliseconds.
"""
import argparse
import sys

from .profiler_overhead import _make, _parts
from .timing import time_alternating
from .workloads import WORKLOADS


def contenders(module, smoke):
    """``{"plain", "locked"}`` -> the same step callable, without and with the lock."""
    step, work = _make(module, smoke)
    model, _ = _parts(step)
    lock = model.inference_lock

    def locked():
        with lock:
            step()
    return {"plain": step, "locked": locked}, work


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inference_lock_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="nanogpt_cpu")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    print(f"{'workload':<16}{'plain ms':>10}{'locked ms':>11}{'locked/plain':>14}")
    for name in args.only.split(","):
        steps, _ = contenders(WORKLOADS[name], args.smoke)
        medians = time_alternating(steps, args.repeats, warmup=1 if args.smoke else 3)
        plain, locked = 1e3 * medians["plain"], 1e3 * medians["locked"]
        print(f"{name:<16}{plain:10.2f}{locked:11.2f}{locked / plain:14.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
