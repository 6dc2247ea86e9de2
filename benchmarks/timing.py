"""Side-by-side timing: alternate the contenders, warm up first, report medians."""
import random
import statistics
import time


def time_alternating(contenders, repeats, warmup=2, sync=None, seed=0):
    """Run each ``name -> step()`` callable ``warmup`` times, then ``repeats`` rounds in which
    every contender runs once (alternating, so machine noise hits all alike), in an order
    shuffled afresh each round (``seed``): what one contender leaves behind for the next
    (PyTorch's OpenMP threads still spinning on the cores, its data in the caches) then falls
    on every other contender alike, not always on the one that follows it in ``contenders``.
    Returns ``name -> median seconds per call``."""
    for step in contenders.values():
        for _ in range(warmup):
            step()
    samples = {name: [] for name in contenders}
    order, shuffle = list(contenders), random.Random(seed).shuffle
    for _ in range(repeats):
        shuffle(order)
        for name in order:
            step = contenders[name]
            if sync:
                sync(name)
            start = time.perf_counter()
            step()
            if sync:
                sync(name)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}
