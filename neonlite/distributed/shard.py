"""Disjoint shards of a data iterator, one per rank."""
from .world import DistributedError


def shard(iterator, world):
    """Make ``iterator`` yield only this rank's part of every global batch and return it.

    Every neonlite iterator (``ArrayIterator``, ``HDF5Iterator``, ``TextWindows`` and the
    ``--max-batches`` wrapper) has ``shard(rank, nranks)``: the epoch's order comes from the
    backend's seeded RNG, the same on every rank, so the shards are disjoint, cover each global
    batch and are reshuffled identically each epoch.  A world of one leaves it as it is.
    """
    if world.size == 1 or iterator is None:
        return iterator
    method = getattr(iterator, "shard", None)
    if method is None:
        raise DistributedError(f"rank {world.rank}: the data iterator "
                               f"{type(iterator).__name__} cannot be split across ranks (it "
                               f"has no shard(rank, nranks) method)")
    method(world.rank, world.size)
    return iterator
