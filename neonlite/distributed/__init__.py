"""Data-parallel training on MPI: every rank runs the same model on its part of each global
batch, and gradients are averaged by bucketed allreduce overlapping the backward pass.

``mpirun -np 4 neonlite train FILE.yaml -z 128`` does it from the command line; the pieces,
for the Python API under mpirun, are :func:`detect_world` (rank, size, local rank),
:func:`shard` (disjoint data shards), :class:`DataParallel` (broadcast from rank 0, gradient
buckets, synchronised batch norm) and, on GPUs with libnccl, :mod:`.nccl`.  See
``docs/distributed.md``.
"""
from .data_parallel import DataParallel
from .shard import shard
from .world import DistributedError, World, detect_world, launched_by_mpi

__all__ = ["DataParallel", "DistributedError", "World", "detect_world", "launched_by_mpi",
           "shard"]
