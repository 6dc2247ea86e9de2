"""The LeNet workload (``lenet.py``: conv5x5x32, pool, conv5x5x64+BN, pool, fc512, dropout,
fc10; 28x28x1 images) trained data-parallel: the scaling row of the benchmark suite.

Run ``python -m benchmarks.workloads.lenet_mpi`` (one rank) and
``mpirun --oversubscribe -np 2 python -m benchmarks.workloads.lenet_mpi`` (two); flags:
``--batch`` (global, default 128), ``--steps`` (timed, default 20), ``--bucket-kib`` (default
1024), ``--sync-bn``, ``--json OUT``.  Rank 0 prints images/s per rank and in total, the
gradient bytes allreduced per step, the buckets, and the overlap achieved: the share of the
step's allreduce time (measured alone, blocking, on the same buckets) that bprop hid.
"""
import argparse
import json
import time

import numpy as np

from .common import random_batch
from .lenet import lenet_model


def build(world, global_batch, bucket_bytes, sync_bn):
    import neonlite
    from neonlite.distributed import DataParallel
    be = neonlite.gen_backend("cpu", batch_size=world.split_batch(global_batch), rng_seed=0,
                              datatype=np.float32)
    model = lenet_model()
    sync = DataParallel(world, bucket_bytes=bucket_bytes, sync_bn=sync_bn)
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


def main(argv=None):
    from neonlite.distributed import detect_world
    from neonlite.optimizers import GradientDescentMomentum
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bucket-kib", type=int, default=1024)
    parser.add_argument("--sync-bn", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    world = detect_world()
    be, model, sync = build(world, args.batch, args.bucket_kib * 1024, args.sync_bn)
    x, t = random_batch(be, (28, 28, 1), 10, seed=world.rank)
    opt = GradientDescentMomentum(0.01, momentum_coef=0.9, wdecay=1e-4)
    for _ in range(3):
        model.train_step(x, t, opt, 0)
    wait0, steps0 = sync.stats["wait_s"], sync.stats["steps"]
    if world.comm is not None:
        world.comm.Barrier()
    begin = time.perf_counter()
    for _ in range(args.steps):
        model.train_step(x, t, opt, 0)
    seconds = time.perf_counter() - begin
    row = {"workload": "lenet_train_mpi", "ranks": world.size, "global_batch": args.batch,
           "images_per_s_per_rank": be.bsz * args.steps / seconds,
           "images_per_s_total": args.batch * args.steps / seconds,
           "step_ms": 1e3 * seconds / args.steps}
    if world.size > 1:
        exposed = (sync.stats["wait_s"] - wait0) / (sync.stats["steps"] - steps0)
        comm = blocking_allreduce_seconds(sync, 10)
        row.update(bucket_bytes=args.bucket_kib * 1024, buckets=len(sync.buckets),
                   bucket_sizes=[b.nbytes for b in sync.buckets],
                   bytes_per_step=sum(b.nbytes for b in sync.buckets),
                   allreduce_ms_blocking=1e3 * comm, allreduce_ms_exposed=1e3 * exposed,
                   overlap=max(0.0, 1.0 - exposed / comm) if comm > 0 else None)
    if world.is_root:
        print(json.dumps(row, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
