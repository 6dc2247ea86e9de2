"""GEMMs for the CPU backend where MKL is not installed (with MKL they go to MKL's CBLAS,
``mkl_blas.py``): numpy's BLAS, with the way to use the cores tuned per shape; and the
backend's ``compound_dot`` and ``batched_dot`` (:class:`CPUBlasOps`), whichever GEMM runs them.

A multithreaded BLAS synchronizes its threads many times inside one GEMM.  For a thin product
(a 5x5 filter on one channel: 25 x 100352 @ 100352 x 32; a weight gradient: 576 x 65536 @
65536 x 64) or a small one those waits cost more than the extra threads gain, and on a busy
machine, where a waiting thread may be descheduled, they can turn milliseconds into seconds;
a big square GEMM on an idle machine, on the other hand, runs nearly twice as fast on two
threads.  :class:`GemmThreads` therefore knows three ways to run a 2-D GEMM:

* ``"one"``: one BLAS thread;
* ``"all"``: BLAS's own threads (numpy's default);
* ``"split"``: the product cut into one piece per core, each an independent single-threaded
  GEMM on its own thread, so no thread waits on another inside a GEMM.  The cut is along the
  axis that costs the least extra memory traffic: output rows (every piece reads all of b),
  output columns (every piece reads all of a) or the inner dimension (the partial products,
  the size of the output, are then added).

The first times it meets a GEMM shape it runs each way ``FIRST`` times, in turn; from then on it
uses the way with the shortest of its last ``SAMPLES`` timings (noise only ever adds time; as
``cudnn.benchmark`` picks convolution algorithms), and now and then it runs another way again,
so the choice follows the machine's load: ``REVISIT`` calls of the shape after the choice was
made, then after twice as many calls each time a revisit leaves the choice as it was (up to
``MAX_REVISIT``), and after ``REVISIT`` again once one changes it.  A losing way is so tried
often while the machine's load moves the choice and rarely while it does not (a two-thread
GEMM run on one thread costs up to twice its time).  GEMMs below ``TINY_MACS`` multiply-adds
always run on one thread.

Threads are set with OpenBLAS's per-calling-thread ``openblas_set_num_threads_local``; where
numpy's BLAS is not an OpenBLAS with that call (MKL, Accelerate, an older OpenBLAS), every GEMM
runs as numpy chooses.
"""
import contextlib
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..ops import OPS
from .kept_calls import KeptCalls
from .threads import openblas, usable_cores

TINY_MACS = 1_000_000
FIRST = 2
SAMPLES = 5
REVISIT = 32
MAX_REVISIT = 256
#: the prepared GEMM calls a CPU backend keeps (:class:`CPUBlasOps`)
MAX_GEMM_CALLS = 4096
WAYS = ("one", "all", "split")
#: the op-table rows whose operand checks run before the products
COMPOUND_DOT, BATCHED_DOT = OPS["compound_dot"], OPS["batched_dot"]


@contextlib.contextmanager
def blas_threads(n):
    """Run the BLAS calls of this block (on this Python thread) on ``n`` BLAS threads
    (``None``: leave BLAS's own setting)."""
    lib = openblas() if n is not None else None
    if lib is None:
        yield
        return
    previous = lib.openblas_set_num_threads_local(n)
    try:
        yield
    finally:
        lib.openblas_set_num_threads_local(previous)


class WayTuner:
    """Picks, per shape key, the fastest of a few ways to run a call, by timing them (see the
    module docstring: each way ``FIRST`` times, then the one with the shortest of its last
    ``SAMPLES`` timings, another way again after ``REVISIT`` calls, then after ever more while
    the revisits confirm the choice).  ``choices`` maps a key to the way now chosen."""

    def __init__(self):
        self.choices = {}
        self._timings = {}
        self._best = {}  # key -> {way: its shortest kept timing}
        # key -> [calls until the next revisit, revisit interval, revisits so far]
        self._revisits = {}

    def pick(self, key, ways):
        """The way to run this call of ``key``; ``ways()`` lists them (asked once per key)."""
        timings = self._timings.get(key)
        if timings is None:
            timings = self._timings[key] = {w: deque(maxlen=SAMPLES) for w in ways()}
            self._best[key] = dict.fromkeys(timings, float("inf"))
        way = self.choices.get(key)
        if way is None:
            return min(timings, key=lambda w: len(timings[w]))
        revisit = self._revisits[key]
        revisit[0] -= 1
        if revisit[0] > 0:
            return way
        revisit[2] += 1
        others = [w for w in timings if w != way]
        return others[revisit[2] % len(others)]

    def record(self, key, way, seconds):
        """That a call of ``key`` run ``way`` took ``seconds``."""
        timings, best = self._timings[key], self._best[key]
        samples = timings[way]
        samples.append(seconds)
        best[way] = min(samples)
        revisit = self._revisits.get(key)
        if revisit is None and not all(len(t) >= FIRST for t in timings.values()):
            return
        before = self.choices.get(key)
        after = self.choices[key] = min(best, key=best.get)
        if revisit is None:
            self._revisits[key] = [REVISIT, REVISIT, 0]
        elif after != before:
            revisit[1] = REVISIT
            revisit[0] = min(revisit[0], REVISIT) if revisit[0] > 0 else REVISIT
        elif revisit[0] <= 0:  # this call was a revisit, and the choice stands
            revisit[1] = min(2 * revisit[1], MAX_REVISIT)
            revisit[0] = revisit[1]


class GemmThreads:
    """``matmul(a, b, out)``: out = a @ b (numpy matmul semantics) run the way measured fastest
    for its shape (see the module docstring).

    ``choices`` maps a shape key to the way now chosen; ``cores`` is how many pieces
    ``"split"`` makes (default: the CPUs this process may run on).
    """

    def __init__(self, cores=None):
        self.cores = cores or usable_cores()
        self.tuner = WayTuner()
        self._partials = {}
        self._pool = None

    @property
    def choices(self):
        return self.tuner.choices

    def use_cores(self, cores):
        """Split GEMMs into ``cores`` pieces from now on; every shape is measured again."""
        if cores == self.cores:
            return
        self.cores = int(cores)
        self.tuner, self._partials = WayTuner(), {}
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def matmul(self, a, b, out):
        if out.size * a.shape[-1] < TINY_MACS:
            with blas_threads(1):
                return np.matmul(a, b, out=out)
        key = (a.shape, a.strides, b.shape, b.strides, out.dtype.char)
        way = self.tuner.pick(key, lambda: self._ways(a, b, out, key))
        start = time.perf_counter()
        self._run(way, a, b, out, key)
        self.tuner.record(key, way, time.perf_counter() - start)
        return out

    def _ways(self, a, b, out, key):
        """The ways to try for a new shape ``key``; a K-split's partial sums and the split's
        thread pool are made here, on the shape's first call, so that the tuner trying "split"
        on a later call allocates nothing."""
        axis = (_split_axis(*a.shape, b.shape[1], self.cores)
                if self.cores > 1 and openblas() is not None and a.ndim == b.ndim == 2
                and out.flags.c_contiguous else None)
        if axis == "k":
            self._partials[key] = [np.empty_like(out) for _ in range(self.cores - 1)]
        if axis is not None and self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.cores - 1,
                                            thread_name_prefix="neonlite-gemm")
        return WAYS if axis is not None else WAYS[:2]

    def _run(self, way, a, b, out, key):
        if way == "split":
            return self._split(a, b, out, key)
        with blas_threads(1 if way == "one" else None):
            return np.matmul(a, b, out=out)

    def _split(self, a, b, out, key):
        (m, k), n, parts = a.shape, b.shape[1], self.cores
        axis = _split_axis(m, k, n, parts)
        size = {"m": m, "n": n, "k": k}[axis]
        cuts = [size * i // parts for i in range(parts + 1)]
        pieces = [slice(i0, i1) for i0, i1 in zip(cuts[:-1], cuts[1:])]
        if axis == "m":
            jobs = [(a[p], b, out[p]) for p in pieces]
        elif axis == "n":
            jobs = [(a, b[:, p], out[:, p]) for p in pieces]
        else:
            jobs = [(a[:, p], b[p], dst) for p, dst in zip(pieces, [out, *self._partials[key]])]
        futures = [self._pool.submit(_one_thread_matmul, *job) for job in jobs[1:]]
        _one_thread_matmul(*jobs[0])
        for future in futures:
            future.result()
        if axis == "k":
            for partial in self._partials[key]:
                np.add(out, partial, out=out)
        return out


def _split_axis(m, k, n, parts):
    """The axis ("m", "n" or "k") to cut an (m, k) @ (k, n) product along into ``parts``
    pieces: the one that adds the least memory traffic, among those long enough to cut; None
    when none is."""
    extra = {}
    if m >= 8 * parts:
        extra["m"] = (parts - 1) * k * n
    if n >= 8 * parts:
        extra["n"] = (parts - 1) * m * k
    if k >= 64 * parts:
        extra["k"] = 2 * (parts - 1) * m * n
    return min(extra, key=extra.get) if extra else None


def _one_thread_matmul(a, b, out):
    with blas_threads(1):
        np.matmul(a, b, out=out)


class CPUBlasOps:
    """``Backend.compound_dot`` and ``batched_dot`` of the CPU backend: the products by its
    kernels' GEMM (MKL's CBLAS or :class:`GemmThreads`), with beta != 0 through a product
    buffer kept per shape (``_gemm_scratch``).

    With MKL, ``compound_dot`` keeps the prepared call of each operand triple
    (``_gemm_calls``, a :class:`KeptCalls` of at most ``MAX_GEMM_CALLS``): keyed by the
    arrays' identities and the transposes, so used again only while the tensors still have
    those arrays (an optimizer arena rebinds parameters').  A layer's GEMMs on its own buffers
    and their kept reshapes (:meth:`CPUTensor.reshape`) so cost one look-up and the MKL call
    each step; slices (``kept`` False: made anew per call) are not kept."""

    def compound_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        arrays = (A._ary, B._ary, C._ary)
        key = (id(arrays[0]), id(arrays[1]), id(arrays[2]), transA, transB)
        kept = self._gemm_calls.find(key, arrays)
        if kept is not None:
            run, overlaps = kept
            if beta == 0.0 or not overlaps:
                run(alpha, beta)
                return C
        COMPOUND_DOT.check("compound_dot", A, B, C, transA, transB)
        a = A._ary.T if transA else A._ary
        b = B._ary.T if transB else B._ary
        c = C._ary
        prepare = getattr(self.kernels.gemm, "prepare", None)
        run = None if prepare is None or not (A.kept and B.kept and C.kept) else \
            prepare(a, b, c)
        if run is None:
            gemm_into(c, a, b, alpha, beta, self._gemm_scratch, self.kernels.gemm.matmul)
            return C
        overlaps = np.may_share_memory(c, a) or np.may_share_memory(c, b)
        self._gemm_calls.keep(key, arrays, (run, overlaps))
        if beta != 0.0 and overlaps:
            gemm_into(c, a, b, alpha, beta, self._gemm_scratch, self.kernels.gemm.matmul)
        else:
            run(alpha, beta)
        return C

    def batched_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        BATCHED_DOT.check("batched_dot", A, B, C, transA, transB)
        a = np.swapaxes(A._ary, -1, -2) if transA else A._ary
        b = np.swapaxes(B._ary, -1, -2) if transB else B._ary
        gemm_into(C._ary, a, b, alpha, beta, self._gemm_scratch, self.kernels.gemm.matmul)
        return C


def gemm_into(c, a, b, alpha, beta, scratch, matmul):
    """c = alpha * a @ b + beta * c, the product by ``matmul(a, b, out)``: in one call where the
    GEMM takes the scales (``matmul_scaled`` of MKL, c not overlapping a or b); else, with
    beta != 0, the product goes through a buffer kept in ``scratch`` (keyed by shape and dtype),
    so repeated calls allocate nothing."""
    scaled = getattr(getattr(matmul, "__self__", None), "matmul_scaled", None)
    if scaled is not None and (beta == 0.0 or not (
            np.may_share_memory(c, a) or np.may_share_memory(c, b))):
        if scaled(a, b, c, alpha, beta):
            return
    if beta == 0.0:
        matmul(a, b, c)
        if alpha != 1.0:
            c *= alpha
        return
    key = (c.shape, c.dtype)
    product = scratch.get(key)
    if product is None:
        product = scratch[key] = np.empty(c.shape, dtype=c.dtype)
    matmul(a, b, product)
    if alpha != 1.0:
        product *= alpha
    if beta != 1.0:
        c *= beta
    c += product
