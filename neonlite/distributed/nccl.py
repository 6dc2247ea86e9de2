"""A cffi binding of the few NCCL calls data-parallel training needs, bootstrapped through
MPI, and the gradient transport that uses it on GPUs.

The library (``libnccl.so.2``, or ``$NEONLITE_NCCL``) is opened lazily in cffi's ABI mode the
first time it is asked for, so nothing is compiled and machines without NCCL never load it.
Rank 0 makes the unique id, MPI broadcasts its 128 bytes, and every rank joins the clique
with ``ncclCommInitRank``.  Each bucket's gradients are summed in place on the backend's
compute stream inside one ``ncclGroupStart`` / ``ncclGroupEnd`` (one fused launch per bucket,
started as soon as the bucket is ready, so it overlaps the rest of bprop), then divided by
the number of ranks.
"""
import os

import numpy as np

CDEF = """
typedef struct ncclComm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef void* cudaStream_t;
ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
const char* ncclGetErrorString(ncclResult_t result);
"""
NCCL_SUM = 0
NCCL_TYPES = {np.dtype(np.float16): 6, np.dtype(np.float32): 7, np.dtype(np.float64): 8}
_LIBRARY_NAMES = ("libnccl.so.2", "libnccl.so")
_lib = {}


class NcclError(RuntimeError):
    """An NCCL call failed or the library cannot be loaded; the message says which."""


def ffi():
    """The cffi FFI with the NCCL declarations (parsing needs no library)."""
    if "ffi" not in _lib:
        import cffi
        _lib["ffi"] = cffi.FFI()
        _lib["ffi"].cdef(CDEF)
    return _lib["ffi"]


def load():
    """The opened NCCL library; raises :class:`NcclError` saying what was tried."""
    if "lib" not in _lib:
        names = [os.environ["NEONLITE_NCCL"]] if os.environ.get("NEONLITE_NCCL") else \
            list(_LIBRARY_NAMES)
        errors = []
        for name in names:
            try:
                _lib["lib"] = ffi().dlopen(name)
                break
            except OSError as err:
                errors.append(f"{name}: {err}")
        else:
            raise NcclError("NCCL is not installed here (" + "; ".join(errors) + ")")
    return _lib["lib"]


def nccl_available():
    """True when the NCCL library can be opened."""
    try:
        load()
    except NcclError:
        return False
    return True


def version():
    """NCCL's version code (e.g. 22304 for 2.23.4)."""
    out = ffi().new("int*")
    _check(load().ncclGetVersion(out), "ncclGetVersion")
    return int(out[0])


def _check(result, call):
    if result != 0:
        message = ffi().string(load().ncclGetErrorString(result)).decode()
        raise NcclError(f"{call} failed: {message} (ncclResult_t {result})")


class NcclComm:
    """An NCCL communicator over the ranks of ``world``, bootstrapped through MPI."""

    def __init__(self, world, collectives):
        lib, f = load(), ffi()
        uid = f.new("ncclUniqueId*")
        if world.rank == 0:
            _check(lib.ncclGetUniqueId(uid), "ncclGetUniqueId")
        raw = np.frombuffer(f.buffer(uid), dtype=np.uint8).copy()
        collectives.broadcast(raw, "broadcast of the NCCL unique id")
        f.memmove(uid, raw.tobytes(), raw.nbytes)
        comm = f.new("ncclComm_t*")
        _check(lib.ncclCommInitRank(comm, world.size, uid[0], world.rank),
               f"ncclCommInitRank (rank {world.rank} of {world.size})")
        self.comm, self.size = comm[0], world.size

    def allreduce_group(self, tensors, stream_handle):
        """Sum every device tensor of ``tensors`` in place over the ranks (at the address its
        backend's ``device_pointer`` gives), as one grouped launch on stream ``stream_handle``."""
        lib, f = load(), ffi()
        stream = f.cast("cudaStream_t", stream_handle)
        _check(lib.ncclGroupStart(), "ncclGroupStart")
        for t in tensors:
            kind = NCCL_TYPES.get(np.dtype(t.dtype))
            if kind is None:
                raise NcclError(f"NCCL allreduce: no NCCL type for {np.dtype(t.dtype)}")
            ptr = f.cast("void*", t.backend.device_pointer(t))
            _check(lib.ncclAllReduce(ptr, ptr, t.size, kind, NCCL_SUM, self.comm, stream),
                   "ncclAllReduce")
        _check(lib.ncclGroupEnd(), "ncclGroupEnd")


class NcclBucket:
    """The parameters of one bucket, reduced on the device (no host staging)."""

    def __init__(self, index, params):
        self.index, self.params = index, list(params)
        self.owners = {id(p.layer): p.layer for p in self.params}
        self.nbytes = int(sum(p.grad.size * np.dtype(p.grad.dtype).itemsize
                              for p in self.params))
        self.reset()

    def reset(self):
        self.pending = set(self.owners)
        self.request = None


class NcclTransport:
    """Bucket allreduce by NCCL on the GPU backend's compute stream."""

    name = "nccl"

    def __init__(self, world, collectives, backend):
        self.comm = NcclComm(world, collectives)
        self.scale = 1.0 / world.size
        self.stream = backend.device.stream.handle

    def make_bucket(self, index, params):
        return NcclBucket(index, params)

    def start(self, bucket, backend):
        self.comm.allreduce_group([p.grad for p in bucket.params], self.stream)
        bucket.request = True

    def poke(self, buckets):
        """NCCL progresses on the GPU by itself."""

    def finish(self, buckets, step):
        """Queue the averaging after the allreduces on the compute stream; returns 0.0 (seconds
        waited: the host never waits here, the optimizer's kernels follow on the stream)."""
        for bucket in buckets:
            for p in bucket.params:
                p.grad[:] = p.grad * self.scale
        return 0.0
