"""Side-by-side timing: alternate the contenders, warm up first, report medians."""
import statistics
import time


def time_alternating(contenders, repeats, warmup=2, sync=None):
    """Run each ``name -> step()`` callable ``warmup`` times, then ``repeats`` rounds in which
    every contender runs once (alternating, so machine noise hits all alike).  Returns
    ``name -> median seconds per call``."""
    for step in contenders.values():
        for _ in range(warmup):
            step()
    samples = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, step in contenders.items():
            if sync:
                sync(name)
            start = time.perf_counter()
            step()
            if sync:
                sync(name)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}
