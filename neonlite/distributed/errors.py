"""The distributed package's error: :class:`DistributedError`."""


class DistributedError(RuntimeError):
    """A distributed run that cannot go on (no mpi4py, a batch that does not split, a rank that
    died or hangs, a bad ``NEONLITE_COLLECTIVE_TIMEOUT``); the message names the rank or the
    setting."""
