"""The bf16 storage path's product where the float32 GEMM is MKL's: ``kernels/cpu/bf16/
gemm_packed.c`` (:func:`gemm_storage_packed`).

One operand (the smaller) is widened and packed by MKL's ``cblas_sgemm_pack`` a chunk at a
time; the other is widened a strip at a time, right before ``cblas_sgemm_compute`` multiplies
the strip by every chunk, and a bf16 result is rounded from each float32 tile while the tile
is still in cache.  So neither operand gets a float32 copy in memory and the result no float32
pass of its own, as the widened copies and sgemm of :func:`~.bf16_kernels.gemm_storage` do.

The packed chunks and the threads' work areas are two areas every product shares
(:class:`SharedArea`, in the kernel modules' ``workspaces``), grown to the largest product's:
a training loop allocates them on its first step only.
"""
import functools
import time

import numpy as np

from ..reference.optree import bf16_to_f32, f32_to_bf16
from .bf16_kernels import BF16, F32
from .blas import TINY_MACS
from .mkl_blas import MKLGemm
from .tensor import aligned_empty
from .threads import openmp_threads

#: columns of op(B) per packed chunk where op(B) is packed, rows of op(A) where op(A) is
#: (measured on the 2-core Emerald Rapids over a d_model 512 transformer's products)
CHUNK = {"B": 512, "A": 256}
#: the shortest inner dimension a product of one chunk is packed in two parts along, on two
#: threads at once (``nl_gemm_packed``'s ``kparts``): the weight gradients' k = 768 of nanoGPT
#: and 2048 of the d_model-512 model, not the d 128 projections' k = 128
KPARTS_MIN_K = 512


def packed_storage_module(modules):
    """The ``gemm_packed`` kernel module where the float32 GEMM is MKL's and has its packed
    GEMMs, else None."""
    gemm = modules.gemm
    if not isinstance(gemm, MKLGemm) or gemm.packed_gemm(F32) is None:
        return None
    return modules.variant("gemm_packed")


class SharedArea:
    """One grow-only float32 buffer, 64-byte aligned, that every packed product of a backend
    uses during its call and no longer: the packed chunks of one call, or the threads' work
    areas of one call.  A call reads :attr:`pointer` when it runs, so a product prepared
    before the area grew uses the grown one.  The calls of one backend run one at a time (a
    model's under its inference lock), as its other shared workspaces assume.  Kept per
    backend in ``modules.workspaces``; a training loop grows it on its first step only."""

    def __init__(self):
        self.array, self.pointer = None, None

    def ensure(self, ffi, size):
        """Hold at least ``size`` floats."""
        if self.array is None or self.array.size < size:
            self.array = aligned_empty((size,), F32)
            self.pointer = ffi.from_buffer("float[]", self.array)


def shared_area(modules, name):
    """The backend's :class:`SharedArea` ``name`` (made on first use): ``packed`` (the
    packed chunks) or ``work`` (the threads' work areas: the packed, fused storage and bf16
    GEMMs' packing buffers)."""
    area = modules.workspaces.get(("bf16_packed_area", name))
    if area is None:
        area = modules.workspaces[("bf16_packed_area", name)] = SharedArea()
    return area


def shared_area_arrays(modules):
    """The arrays of the :class:`SharedArea` s in ``modules.workspaces`` (for
    ``workspace_bytes``)."""
    return [area.array for area in modules.workspaces.values()
            if isinstance(area, SharedArea) and area.array is not None]


def _areas(modules, module, m, n, k, packed, threads):
    """(packed pieces' area, their stride, work areas' area, their stride, strip, chunk, parts
    of k) for this product: the strides and pieces worked out on first use and kept in
    ``modules.workspaces`` by shape, the two areas (:class:`SharedArea`) grown to hold this
    product's.  Every chunk and work area starts on a 64-byte boundary (MKL's packed GEMM
    and the widening loops run slower across cache lines, by how much depending on where
    numpy's 16-byte-aligned arrays happen to fall).

    MKL's ``cblas_sgemm_pack_get_size`` asks about 8 MB for a packed operand of any size up
    to a chunk (a 128 x 128 one too); areas of their own for each of a transformer's 15 or so
    product shapes held about 120 MB, 37 MB of it resident."""
    key = ("bf16_packed", m, n, k, packed, threads)
    found = modules.workspaces.get(key)
    if found is None:
        elements = modules.gemm.packed_gemm(F32)[2]
        chunk = CHUNK[packed]
        strip = int(module.lib.nl_gemm_packed_strip(k, m if packed == "B" else n))
        chunks = -(-(n if packed == "B" else m) // chunk)
        kparts = 2 if chunks == 1 and k >= KPARTS_MIN_K else 1
        part = int(module.lib.nl_gemm_packed_part(k, kparts))
        if packed == "B":
            stride = elements(m, min(chunk, n), part, "B")
        else:
            stride = elements(min(chunk, m), n, part, "A")
        stride = -(-stride // 16) * 16
        work = -(-int(module.lib.nl_gemm_packed_work(k, strip, chunk)) // 16) * 16
        found = modules.workspaces[key] = (chunks * kparts * stride, stride, threads * work,
                                           work, strip, chunk, kparts)
    chunk_size, stride, work_size, work, strip, chunk, kparts = found
    packed_area, work_area = shared_area(modules, "packed"), shared_area(modules, "work")
    packed_area.ensure(module.ffi, chunk_size)
    work_area.ensure(module.ffi, work_size)
    return packed_area, stride, work_area, work, strip, chunk, kparts


def prepare_storage_packed(modules, module, a, b, c, bits, trans_a=False, trans_b=False,
                           packed=None, threads=None):
    """``run(alpha, beta)``: ``alpha * op(a) @ op(b) + beta * out`` on these arrays, with
    ``a`` and ``b`` bf16 (uint16 bits, 2-D, unit-stride rows), into float32 ``c`` or bf16
    ``bits`` (exactly one not None, unit-stride rows), in float32 arithmetic on
    :func:`packed_storage_module`'s kernel, its arguments worked out now (the caller keeps the
    arrays alive while it keeps ``run``).  ``packed``: the operand MKL packs, ``"A"`` or
    ``"B"`` (default: the smaller); ``threads``: default one for a product under
    ``TINY_MACS`` multiply-adds, else one or all of OpenMP's, whichever MKL's way tuner
    measures faster for this shape (the tiles are the same either way, so are the bits).
    Shapes and strides checked by the caller."""
    m, k = a.shape[::-1] if trans_a else a.shape
    out = bits if c is None else c
    n = out.shape[1]
    if m == 0 or n == 0:
        return lambda alpha, beta: None
    if k == 0:
        return functools.partial(_scale, c, bits)
    if packed is None:
        packed = "B" if b.size <= a.size else "A"
    tuned = threads is None and m * n * k >= TINY_MACS and openmp_threads() > 1
    if threads is None:
        threads = openmp_threads() if tuned else 1
    chunks, stride, work, work_stride, strip, chunk, kparts = _areas(modules, module, m, n, k,
                                                                    packed, threads)
    pack, compute = modules.gemm.packed_gemm(F32)[:2]
    ffi = module.ffi
    product = ffi.new("nl_packed_product *", {
        "A": ffi.cast("uint16_t *", a.ctypes.data), "B": ffi.cast("uint16_t *", b.ctypes.data),
        "C": ffi.NULL if c is None else ffi.cast("float *", c.ctypes.data),
        "Cb": ffi.NULL if bits is None else ffi.cast("uint16_t *", bits.ctypes.data),
        "M": m, "N": n, "K": k, "lda": a.strides[0] // BF16.itemsize,
        "ldb": b.strides[0] // BF16.itemsize, "ldc": out.strides[0] // out.itemsize,
        "transA": int(trans_a), "transB": int(trans_b), "pack_b": int(packed == "B"),
        "packed_stride": stride, "work_stride": work_stride, "strip": strip, "chunk": chunk,
        "kparts": kparts, "pack": pack, "compute": compute,
        "set_threads": modules.gemm.thread_setter_address()})
    function = module.lib.nl_gemm_packed_run

    def call(alpha, beta, count):
        if function(product, alpha, beta, chunks.pointer, work.pointer, count) != 0:
            raise RuntimeError("compound_dot: the packed storage GEMM refused the call")
    if not tuned:
        return functools.partial(call, count=threads)
    return functools.partial(_tuned, call, threads, modules.gemm.tuner,
                             ("bf16 packed", m, n, k, bool(trans_a), bool(trans_b), packed))


def _tuned(call, threads, tuner, key, alpha, beta):
    """``call`` on one thread or ``threads``, as ``tuner`` picks for ``key``, timed for it."""
    way = tuner.pick(key, _both_ways)
    start = time.perf_counter()
    call(alpha, beta, 1 if way == "one" else threads)
    tuner.record(key, way, time.perf_counter() - start)


def _both_ways():
    """The ways a tuned product runs: on one thread or on all."""
    return ("one", "all")


def _scale(c, bits, alpha, beta):
    """The product of an empty inner dimension: the output times beta."""
    if c is not None:
        c *= np.float32(beta)
    else:
        bits[...] = f32_to_bf16(np.float32(beta) * bf16_to_f32(bits))


def gemm_storage_packed(modules, module, a, b, c, bits, alpha=1.0, beta=0.0, trans_a=False,
                        trans_b=False, packed=None, threads=None):
    """The product of :func:`prepare_storage_packed` run once; returns the output."""
    prepare_storage_packed(modules, module, a, b, c, bits, trans_a, trans_b, packed,
                           threads)(alpha, beta)
    return bits if c is None else c
