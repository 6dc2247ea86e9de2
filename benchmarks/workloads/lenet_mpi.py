"""The LeNet workload (``lenet.py``: conv5x5x32, pool, conv5x5x64+BN, pool, fc512, dropout,
fc10; 28x28x1 images) trained data-parallel: the scaling row of the benchmark suite.

Run ``python -m benchmarks.workloads.lenet_mpi`` (one rank) and
``mpirun --oversubscribe -np 2 python -m benchmarks.workloads.lenet_mpi`` (two); flags:
``--batch`` (global, default 128), ``--steps`` (timed per mode, default 20), ``--bucket-kib``
(default 1024), ``--sync-bn``, ``--progress auto|thread|layers|compare`` (who drives MPI's
progress during bprop: ``DataParallel``'s choice, a background thread, tests between layers,
or the last two in alternating blocks of steps), ``--json OUT``.  Rank 0 prints, per mode, the
median step's images/s per rank and in total and the median wait for allreduces after bprop,
with the gradient bytes allreduced per step, the buckets, and the overlap achieved: the share
of the step's allreduce time (measured alone, blocking, on the same buckets) that bprop hid.
"""
import argparse
import json
import time

import numpy as np

from .common import random_batch
from .lenet import lenet_model


def build(world, global_batch, bucket_bytes, sync_bn, progress="auto"):
    import neonlite
    from neonlite.distributed import DataParallel
    be = neonlite.gen_backend("cpu", batch_size=world.split_batch(global_batch), rng_seed=0,
                              datatype=np.float32)
    model = lenet_model()
    sync = DataParallel(world, bucket_bytes=bucket_bytes, sync_bn=sync_bn,
                        progress_thread={"auto": None, "thread": True, "layers": False}[progress])
    sync.attach(model)
    if world.size > 1:
        sync.start(model)
    return be, model, sync


def blocking_allreduce_seconds(sync, repeats):
    """Median time of allreducing every bucket once, blocking (no compute to hide behind)."""
    times = []
    for _ in range(repeats):
        sync.world.comm.Barrier()
        begin = time.perf_counter()
        for bucket in sync.buckets:
            sync.collectives.allreduce(bucket.buf, "benchmark allreduce")
        times.append(time.perf_counter() - begin)
    return float(np.median(times))


BLOCK = 5


def progress_modes(sync, choice):
    """{label: progress thread or None} to time: the one asked for, or (``compare``) both, in
    alternating blocks of steps."""
    if sync.world.size == 1:
        return {"single": None}
    current = sync.transport.progress
    label = "thread" if current is not None else "layers"
    if choice != "compare":
        return {label: current}
    from neonlite.distributed.progress import progress_thread_for
    thread = current or progress_thread_for(sync.collectives.MPI)
    return {"layers": None, "thread": thread}


def timed_steps(model, sync, x, t, opt, steps):
    """[(seconds of the step, seconds of it spent waiting for allreduces)] for ``steps`` steps;
    the wait is the communication bprop did not hide (and any lag of a slower rank)."""
    out = []
    for _ in range(steps):
        waited = sync.stats["wait_s"]
        begin = time.perf_counter()
        model.train_step(x, t, opt, 0)
        out.append((time.perf_counter() - begin, sync.stats["wait_s"] - waited))
    return out


def main(argv=None):
    from neonlite.distributed import detect_world
    from neonlite.optimizers import GradientDescentMomentum
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bucket-kib", type=int, default=1024)
    parser.add_argument("--sync-bn", action="store_true")
    parser.add_argument("--progress", choices=("auto", "thread", "layers", "compare"),
                        default="auto")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    world = detect_world()
    be, model, sync = build(world, args.batch, args.bucket_kib * 1024, args.sync_bn,
                            "auto" if args.progress == "compare" else args.progress)
    x, t = random_batch(be, (28, 28, 1), 10, seed=world.rank)
    opt = GradientDescentMomentum(0.01, momentum_coef=0.9, wdecay=1e-4)
    for _ in range(3):
        model.train_step(x, t, opt, 0)
    modes = progress_modes(sync, args.progress)
    timings = {name: [] for name in modes}
    for block in range(max(1, args.steps // BLOCK) * len(modes)):
        name = list(modes)[block % len(modes)]
        if world.size > 1:
            sync.transport.progress = modes[name]
            world.comm.Barrier()
        timings[name] += timed_steps(model, sync, x, t, opt, BLOCK)
    row = {"workload": "lenet_train_mpi", "ranks": world.size, "global_batch": args.batch}
    comm = blocking_allreduce_seconds(sync, 10) if world.size > 1 else None
    for name, steps in timings.items():
        step = float(np.median([s for s, _ in steps]))
        exposed = float(np.median([w for _, w in steps]))
        entry = {"images_per_s_per_rank": be.bsz / step, "images_per_s_total": args.batch / step,
                 "step_ms": 1e3 * step}
        if comm:
            entry.update(allreduce_ms_exposed=1e3 * exposed,
                         overlap=max(0.0, 1.0 - exposed / comm))
        row[name] = entry
    if world.size > 1:
        row.update(cores_per_rank=len(sync.cores) if sync.cores else None,
                   threads_per_rank=sync.threads,
                   bucket_bytes=args.bucket_kib * 1024, buckets=len(sync.buckets),
                   bucket_sizes=[b.nbytes for b in sync.buckets],
                   bytes_per_step=sum(b.nbytes for b in sync.buckets),
                   allreduce_ms_blocking=1e3 * comm)
    if world.is_root:
        print(json.dumps(row, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
