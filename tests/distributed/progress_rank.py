"""Start a 6.6 MB Iallreduce, compute for ``seconds`` without entering MPI, then report
whether a single MPI_Test finds it complete; with ``thread`` a ProgressThread polls meanwhile.

Usage (under mpirun): python progress_rank.py thread|none SECONDS
Prints, on rank 0, one line: ``complete=<bool> correct=<bool> polls=<n>``.
"""
import sys
import time

import numpy as np
from mpi4py import MPI

from neonlite.distributed.progress import ProgressThread


def main(mode, seconds):
    comm = MPI.COMM_WORLD
    buf = np.full(1_650_000, comm.rank + 1.0, dtype=np.float32)
    thread = ProgressThread(MPI) if mode == "thread" else None
    comm.Barrier()
    request = comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    if thread is not None:
        thread.busy()
    a = np.random.default_rng(0).random((200, 200))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = np.tanh(a @ a)
    complete = request.Test()
    request.Wait()
    if thread is not None:
        thread.idle()
        thread.stop()
    expected = comm.size * (comm.size + 1) / 2
    if comm.rank == 0:
        print(f"complete={complete} correct={bool(np.all(buf == expected))} "
              f"polls={thread.polls if thread else 0}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
