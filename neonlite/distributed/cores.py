"""Each rank's share of the cores of its machine, when the launcher left the ranks of one
machine all free to run on the same cores.

``mpirun --oversubscribe`` (or ``--bind-to none``) starts every rank with every core in its
affinity mask, and each rank's OpenMP and BLAS then start one thread per core: two ranks on two
cores run four busy threads, which wait on each other at every barrier of a parallel loop.
:func:`share_cores` gives each of the ``L`` ranks that share a mask of ``C`` cores its own
``C // L`` of them (pinned, in local-rank order) and sizes the thread pools to that share, as
one process per GPU gets its own device (``DataParallel.start`` hands the thread count to the
backend's ``set_threads``); where there are more such ranks than cores, each runs one thread,
unpinned.  It leaves everything as it is where the launcher bound the ranks apart
(``mpirun -np 2`` on two cores binds each to one) and where ``OMP_NUM_THREADS`` is set (the
user chose).
"""
import os

from ..backends.cpu.threads import usable_cores

__all__ = ["plan_core_share", "share_cores", "usable_cores"]


def plan_core_share(masks, me):
    """The cores rank ``me`` should keep, or None to leave it as it is.

    ``masks``: each local rank's affinity (a sorted tuple of core ids), by local rank.  Ranks
    with the same mask as ``me`` split it in local-rank order; a mask shared by no other rank,
    or by more ranks than it has cores, is left alone."""
    mine = masks[me]
    sharing = [r for r, mask in enumerate(masks) if mask == mine]
    if len(sharing) < 2 or len(mine) < len(sharing):
        return None
    per_rank = len(mine) // len(sharing)
    slot = sharing.index(me)
    return mine[slot * per_rank:(slot + 1) * per_rank]


def share_cores(world, environ=None):
    """Pin this rank to its share of the cores (see the module docstring).  Returns ``(cores
    kept, threads)``, the threads for the backend's ``set_threads``: ``(None, None)`` when
    nothing is to change, ``(None, 1)`` where more ranks than cores share a mask (each then
    runs one thread, unpinned).  Collective: every rank of ``world`` must call it."""
    environ = os.environ if environ is None else environ
    if world.comm is None or not hasattr(os, "sched_setaffinity"):
        return None, None
    from mpi4py import MPI
    host = MPI.Get_processor_name()
    mask = tuple(sorted(os.sched_getaffinity(0)))
    everyone = world.comm.allgather((host, world.local_rank, mask))
    if "OMP_NUM_THREADS" in environ:
        return None, None
    local = sorted((rank, m) for h, rank, m in everyone if h == host)
    masks = [m for _, m in local]
    cores = plan_core_share(masks, world.local_rank)
    if cores is None:
        return (None, 1) if masks.count(mask) > len(mask) else (None, None)
    os.sched_setaffinity(0, cores)
    return list(cores), len(cores)
