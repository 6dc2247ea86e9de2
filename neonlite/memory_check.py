"""Refusing a network that cannot fit in memory before allocating any of it.

A size typo (``nout: 3000000000``, ``fshape: [3, 3, 100000000]``) would otherwise make the
first allocation take all memory or fail deep in numpy.  :func:`check_outputs_fit` adds up the
output (and delta) buffers every leaf layer will allocate for one batch and compares the sum
with the memory available: the backend's ``memory_bytes()`` where it has one (a GPU's), else
the machine's physical memory.
"""
import os

import numpy as np

GIB = float(1 << 30)


def physical_memory_bytes():
    """The machine's physical memory in bytes (None where it cannot be known)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class NetworkTooLarge(ValueError):
    """A network whose buffers cannot fit in memory; the message says where and how much."""


def check_outputs_fit(leaves, be):
    """Raise :class:`NetworkTooLarge` when the outputs and deltas of ``leaves`` (configured layers,
    each with ``out_shape``) for a batch of ``be.bsz`` need more than the available memory;
    the message names the largest layer and says how many GiB are needed."""
    limit = getattr(be, "memory_bytes", physical_memory_bytes)()
    if not limit:
        return
    try:
        itemsize = np.dtype(be.dtype).itemsize
    except TypeError:
        itemsize = 2
    sizes = [(float(np.prod(leaf.out_shape, dtype=np.float64)) * be.bsz * itemsize, leaf)
             for leaf in leaves if getattr(leaf, "out_shape", None) is not None]
    total = 2 * sum(size for size, _ in sizes)
    if total <= limit:
        return
    size, leaf = max(sizes, key=lambda pair: pair[0])
    where = getattr(leaf, "_config_path", None)
    name = f"{where} ({leaf.name})" if where else f"layer '{leaf.name}'"
    raise NetworkTooLarge(f"{name}: its output {tuple(leaf.out_shape)} for a batch of {be.bsz} "
                          f"needs "
                f"{size / GIB:,.1f} GiB; the network's outputs and deltas need "
                f"{total / GIB:,.1f} GiB, more than the {limit / GIB:,.1f} GiB of memory here "
                f"(a size typo?)")
