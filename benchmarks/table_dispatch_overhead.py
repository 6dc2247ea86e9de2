"""The op table's dispatch overhead on the CPU, A/B in one process: the per-step glue the
recurrent gate steps had before the table (``check_gate_step``, ``usable``, ``from_buffer``,
the C call) against the table-made ``be.lstm_fprop_step``, on the same time-step slices
(not kept, as a recurrent layer's).  Best of 3000 alternating runs of 8 steps each.

    python benchmarks/table_dispatch_overhead.py N H      (e.g. 4 16, 32 128)
"""
import sys
import time

import numpy as np

import neonlite
from neonlite.backends.operand_shapes import check_gate_step
from neonlite.backends.reference.recurrent import ACTIVATION_CODES

STEPS = 8


def old_step(be, gates, hg, c_prev, c, h_prev, h, mask=None, activation="tanh",
             gate_activation="logistic"):
    """The CPU backend's lstm_fprop_step before the op table dispatched it."""
    check_gate_step("lstm", "h", "lstm_fprop_step", gates=gates, hg=hg, c_prev=c_prev, c=c,
                    h_prev=h_prev, h=h, mask=mask)
    tensors = [None if t is None else t.__array__()
               for t in (gates, hg, c_prev, c, h_prev, h, mask)]
    module = be.kernels.usable("recurrent", *[a for a in tensors if a is not None])
    ffi = module.ffi
    args = [ffi.NULL if a is None else ffi.from_buffer("real[]", a) for a in tensors]
    N, H = h.shape
    module.lib.lstm_fprop_step(*args, N, H, ACTIVATION_CODES[activation],
                               ACTIVATION_CODES[gate_activation])


def main(N, H):
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    rng = np.random.default_rng(0)
    gates = be.array(rng.normal(size=(STEPS, N, 4 * H)))
    hg = be.array(rng.normal(size=(N, 4 * H)))
    c = be.array(rng.normal(size=(STEPS + 1, N, H)))
    h = be.array(rng.normal(size=(STEPS + 1, N, H)))

    def run(step):
        start = time.perf_counter()
        for t in range(STEPS):
            step(gates[t], hg, c[t], c[t + 1], h[t], h[t + 1], None)
        return time.perf_counter() - start

    ways = {"before the table": lambda *a: old_step(be, *a), "table": be.lstm_fprop_step}
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(3000):
        for name, step in ways.items():
            best[name] = min(best[name], run(step))
    print(f"lstm_fprop_step N={N} H={H}: " + ", ".join(
        f"{name} {seconds / STEPS * 1e6:.2f} us" for name, seconds in best.items()))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
