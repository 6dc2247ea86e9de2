"""The MPI world a process runs in: rank, size, local rank and the communicator.

``mpirun -np 4 neonlite train ...`` starts four processes; each finds its place here.  MPI is
detected from the launcher's environment (Open MPI's ``OMPI_COMM_WORLD_SIZE``, MPICH/PMI's
``PMI_SIZE``), so a plain ``python`` process never imports mpi4py and runs as a world of one.
mpi4py is the optional extra ``pip install neonlite[mpi]``.
"""
import os
import sys
import traceback
from contextlib import contextmanager

from .errors import DistributedError
from .collective import collective_timeout
from .startup import StartupWatch, env_rank

_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


class World:
    """One process's view of the job.

    Attributes:
        rank (int): this process's rank, 0 .. size - 1 (rank 0 prints, logs and checkpoints).
        size (int): the number of processes.
        local_rank (int): the rank among the processes on this machine (the GPU to use).
        comm: the mpi4py communicator (None for a world of one).
    """

    def __init__(self, rank=0, size=1, local_rank=0, comm=None, startup=None):
        self.rank, self.size, self.local_rank, self.comm = rank, size, local_rank, comm
        self.startup = startup

    @property
    def is_root(self):
        return self.rank == 0

    def __repr__(self):
        return f"World(rank={self.rank}, size={self.size}, local_rank={self.local_rank})"

    def bcast(self, obj, root=0):
        """``obj`` of rank ``root`` on every rank (a small picklable value; MPI's own pickle
        of objects made by this same program, never of a file)."""
        if self.comm is None:
            return obj
        self.startup_stage("broadcast")
        value = self.comm.bcast(obj, root=root)
        if self.startup is not None:
            self.startup.idle()
        return value

    def startup_stage(self, stage):
        """Start-up (see :mod:`neonlite.distributed.startup`) enters ``stage``: it must end
        within the collective timeout."""
        if self.startup is not None:
            self.startup.enter(stage)

    def startup_done(self):
        """Start-up is over: from here the collectives keep their own timeouts."""
        if self.startup is not None:
            self.startup.done()
            self.startup = None

    def split_batch(self, global_batch):
        """The per-rank batch size of ``global_batch`` (the ``-z`` value); it must divide."""
        if global_batch % self.size:
            raise DistributedError(f"rank {self.rank}: the global batch size {global_batch} "
                                   f"does not split across {self.size} ranks; use a multiple "
                                   f"of {self.size}")
        return global_batch // self.size

    @contextmanager
    def abort_on_error(self, verbose=False):
        """Run the body; an exception on this rank is printed with the rank (and the
        traceback with ``verbose``) and ends the whole job, so no rank waits for it forever."""
        try:
            yield self
        except SystemExit:
            raise
        except BaseException as err:
            if verbose:
                traceback.print_exc()
            text = " ".join(str(err).split()) or type(err).__name__
            self.abort(f"error: {type(err).__name__}: {text}")

    def abort(self, message, status=1):
        """Print ``rank R: message`` on stderr and end the whole job (every rank)."""
        print(f"neonlite: rank {self.rank}/{self.size}: {message}", file=sys.stderr, flush=True)
        if self.comm is not None:
            self.comm.Abort(status)
        raise SystemExit(status)


def launched_by_mpi(environ=None):
    """True when a launcher (mpirun, mpiexec, srun with PMI) started more than one process."""
    environ = os.environ if environ is None else environ
    for var in _SIZE_VARS:
        value = environ.get(var, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def detect_world():
    """The :class:`World` of this process: a world of one unless launched by MPI with more
    than one process (then mpi4py is required and imported here)."""
    if not launched_by_mpi():
        return World()
    try:
        import mpi4py  # noqa: F401 (not yet MPI: importing mpi4py.MPI runs MPI_Init)
    except ImportError as err:
        raise DistributedError(f"this process was started by mpirun with "
                               f"{_launcher_size()} ranks, but mpi4py cannot be imported "
                               f"({err}); pip install 'neonlite[mpi]'") from None
    size = _launcher_size()
    watch = StartupWatch(env_rank(), int(size) if size.isdigit() else 1, collective_timeout())
    watch.enter("init")
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    watch.enter("barrier")
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    watch.idle()
    world = World(comm.Get_rank(), comm.Get_size(), local.Get_rank(), comm, watch)
    local.Free()
    return world


def _launcher_size():
    return next((os.environ[v] for v in _SIZE_VARS if v in os.environ), "?")
