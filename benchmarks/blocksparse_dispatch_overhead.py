"""The op table's dispatch overhead for a row whose kernel takes its plan's arguments, on the
CPU, A/B in one process: ``blocksparse_fprop`` as the CPU section file called it before the
table dispatched it (``check_blocksparse``, ``usable``, the plan's tables and pack buffer,
the C call) against the table-made ``be.blocksparse_fprop`` (the row's binding, check,
``run_plan_op`` and the same call), on the same small operands: kept tensors (a layer's
buffers: the table path keeps the prepared call) and per-call slices (nothing kept).  Best of
``ROUNDS`` alternating loops of ``CALLS`` calls.

    python benchmarks/blocksparse_dispatch_overhead.py [CALLS] [ROUNDS]   (defaults 2000, 200)
"""
import sys
import time

import numpy as np

import neonlite
from neonlite.backends.operand_shapes import check_blocksparse


def old_fprop(be, plan, x, w, y):
    """The CPU backend's blocksparse_fprop before the op table dispatched it."""
    check_blocksparse("blocksparse_fprop", plan, x=x, w=w, y=y)
    x, w, y = x.__array__(), w.__array__(), y.__array__()
    module = be.kernels.usable("blocksparse", x, w, y)
    ffi, lib = module.ffi, module.lib
    real = lambda a: ffi.cast("real *", ffi.from_buffer(a))  # noqa: E731
    tb = plan.table_pointers(module)
    M, nin = x.shape
    pack = plan.work("task_in", lib.bs_threads() * lib.bs_task_rows() * nin, x.dtype)
    lib.bs_linear_fprop(real(x), real(w), real(y), M, nin, y.shape[1], plan.bs, tb["col_ptr"],
                        tb["col_k"], tb["col_other"], real(pack))


def _best(ways, calls, rounds):
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(rounds):
        for name, call in ways.items():
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[name] = min(best[name], time.perf_counter() - start)
    return ", ".join(f"{name} {seconds / calls * 1e6:.2f} us" for name, seconds in best.items())


def main(calls=2000, rounds=200):
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    rng = np.random.default_rng(0)
    plan = be.blocksparse_layer(np.tril(np.ones((2, 2), np.uint8)), 8)
    x, w, y = (be.array(rng.normal(size=s)) for s in ((4, 16), (plan.nnz, 8, 8), (4, 16)))
    xs, ys = be.array(rng.normal(size=(2, 4, 16))), be.zeros((2, 4, 16))
    for kind, (a, b) in (("kept", (lambda: x, lambda: y)),
                         ("slices", (lambda: xs[1], lambda: ys[1]))):
        ways = {"before the table": lambda: old_fprop(be, plan, a(), w, b()),
                "table": lambda: be.blocksparse_fprop(plan, a(), w, b())}
        print(f"blocksparse_fprop (4, 16) x 3 blocks of 8, {kind}: "
              + _best(ways, calls, rounds))


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
