"""Where a training step's time goes: ``python -m benchmarks.profile_step [--workload NAME]
[--steps N] [--cprofile K]``.

Times ``steps`` training steps of a neonlite workload (default ``nanogpt_cpu``) with
wall-clock timers around the phases of ``Model.train_step`` (zero gradients, fprop, cost,
bprop, optimizer update) and prints the median of each in ms; ``--cprofile K`` also prints the
K functions with the most cumulative time under the Python profiler."""
import argparse
import cProfile
import pstats
import statistics
import time

from .run import _make_backend_factory
from .workloads import WORKLOADS


def phase_times(model, x, t, optimizer, steps):
    """Median ms per phase over ``steps`` steps (after two warm-up steps)."""
    phases = {"zero_grads": [], "fprop": [], "cost": [], "bprop": [], "update": []}

    def step(record):
        marks = [time.perf_counter()]
        model.zero_grads()
        marks.append(time.perf_counter())
        y = model.layers.fprop(x)
        marks.append(time.perf_counter())
        _, delta = model.cost.cost_and_errors(y, t)
        marks.append(time.perf_counter())
        model.layers.bprop(delta)
        marks.append(time.perf_counter())
        optimizer.optimize(model.parameters(), 0)
        marks.append(time.perf_counter())
        if record:
            for name, start, end in zip(phases, marks, marks[1:]):
                phases[name].append((end - start) * 1e3)

    for _ in range(2):
        step(False)
    for _ in range(steps):
        step(True)
    return {name: statistics.median(v) for name, v in phases.items()}


def _captured(module):
    """(model, x, t, optimizer) of the workload, captured from its step's closure."""
    step, _ = module.neonlite(_make_backend_factory("cpu"), False)
    cells = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))
    return cells["model"], cells["x"], cells["t"], cells["opt"], step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="nanogpt_cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cprofile", type=int, default=0)
    args = parser.parse_args(argv)
    model, x, t, opt, step = _captured(WORKLOADS[args.workload])
    times = phase_times(model, x, t, opt, args.steps)
    for name, ms in times.items():
        print(f"{name:<12}{ms:8.2f} ms")
    print(f"{'total':<12}{sum(times.values()):8.2f} ms")
    if args.cprofile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.steps):
            step()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.cprofile)


if __name__ == "__main__":
    main()
