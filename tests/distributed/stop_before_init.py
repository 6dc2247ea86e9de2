"""The last rank stops itself (SIGSTOP) before MPI_Init, as a rank stopped within the first
second of a job would; the other ranks must end the job within the collective timeout,
naming it.

Usage: mpirun -np N python stop_before_init.py LENET.yaml
"""
import os
import signal
import sys

from neonlite.cli import main

if __name__ == "__main__":
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    if rank == int(os.environ.get("OMPI_COMM_WORLD_SIZE", "2")) - 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(main(["train", sys.argv[1], "-z", "64", "-q", "--max-batches", "2"]))
