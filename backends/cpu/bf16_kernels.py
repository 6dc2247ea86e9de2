"""The bfloat16 kernels of the CPU backend (``kernels/cpu/bf16/``) and the two ways to run a
product on bf16-stored operands:

* ``compute``: bf16 x bf16 -> float32-accumulate on the bf16 instructions
  (:func:`gemm_bf16`: ``VDPBF16PS``, or AMX ``TDPBF16PS`` where the kernel grants the tile
  state), variant chosen by :func:`gemm_variant` from the runtime CPU facts
  (``kernels/cpu_features.py``) alone, so where they say no (or ``NEONLITE_CPU_FEATURES_OFF``
  turns them off) no module holding bf16 instructions is loaded;
* ``storage``: float32 arithmetic, so only the memory holds bf16: where the CPU has AVX-512 or
  AVX2 with FMA and the float32 GEMM is not MKL's (:func:`fused_storage_module`),
  :func:`gemm_storage_fused` (``kernels/cpu/bf16/gemm_storage.c``: each operand bf16 or
  float32, widened while the GEMM packs it, the output rounded to bf16 in its epilogue, no pass
  of its own over any operand);
  elsewhere :func:`gemm_storage`, the operands widened to float32 (exact) and the backend's
  float32 GEMM (MKL or numpy's BLAS).

bf16 arrays are numpy ``uint16`` bit patterns (the upper half of a float32), as Adam's bf16
states are; float32 -> bf16 rounds to nearest even (``kernels/cpu/bf16_bits.h``, the numpy
reference :func:`~neonlite.backends.reference.optree.f32_to_bf16`).
"""
import numpy as np

from ...kernels import cpu_features
from ..reference.optree import bf16_to_f32, f32_to_bf16
from .blas import gemm_into
from .mkl_blas import MKLGemm

#: the element type of bf16 arrays (bit patterns)
BF16 = np.dtype(np.uint16)
F32 = np.dtype(np.float32)


def gemm_variant():
    """``(kernel variant name or None, reason)`` of the bf16 GEMM this CPU may run, from the
    CPU facts alone (no module loaded): ``gemm_bf16_amx`` where AMX-BF16 is usable,
    ``gemm_bf16`` where AVX512-BF16 is, else None."""
    amx, why_not_amx = cpu_features.amx_bf16_state()
    if amx:
        return "gemm_bf16_amx", "AMX-BF16 (TDPBF16PS), tile state granted"
    if cpu_features.has_avx512_bf16():
        return "gemm_bf16", f"AVX512-BF16 (VDPBF16PS); no AMX: {why_not_amx}"
    off = cpu_features.forced_off()
    return None, ("no AVX512-BF16 on this CPU" if "avx512_bf16" not in off else
                  f"AVX512-BF16 turned off ({cpu_features.FEATURES_OFF}={','.join(sorted(off))})")


def gemm_module(modules):
    """``(module or None, reason)``: the bf16 GEMM this machine runs, loaded only where the CPU
    facts allow it and checked to hold the instructions (``nl_gemm_bf16_built``)."""
    name, reason = gemm_variant()
    if name is None:
        return None, reason
    module = modules.variant(name)
    if module is None:
        return None, f"the {name} kernel cannot be built here"
    if not module.lib.nl_gemm_bf16_built():
        return None, f"the C compiler's -march=native does not enable {reason.split(';')[0]}"
    return module, reason


#: the CPU facts each micro-kernel of the storage path's GEMM needs (``nl_gemm_storage_isa``)
STORAGE_ISAS = {"AVX-512": ("AVX-512 (F, BW, VL)", cpu_features.has_avx512_float),
                "AVX2": ("AVX2 and FMA", cpu_features.has_avx2_float)}


def storage_isa(module):
    """The instruction set of the micro-kernel compiled into a ``gemm_storage`` module:
    ``"AVX-512"``, ``"AVX2"`` or ``"none"``."""
    return module.ffi.string(module.lib.nl_gemm_storage_isa()).decode()


def storage_module(modules):
    """``(module or None, reason)``: the storage path's fused GEMM, loaded only where the CPU
    facts say AVX-512 or AVX2 with FMA runs (lowered by ``NEONLITE_CPU_FEATURES_OFF``) and
    checked to hold a micro-kernel the facts allow (``nl_gemm_storage_isa``: -march=native
    compiles the widest this CPU has, so on an AVX-512 CPU with AVX-512 turned off the module
    is not used)."""
    if not (cpu_features.has_avx512_float() or cpu_features.has_avx2_float()):
        return None, "no AVX-512 (F, BW, VL) or AVX2 with FMA on this CPU, or turned off"
    module = modules.variant("gemm_storage")
    if module is None:
        return None, "the gemm_storage kernel cannot be built here"
    if not module.lib.nl_gemm_storage_built():
        return None, "the C compiler's -march=native enables neither AVX-512 nor AVX2 with FMA"
    isa = storage_isa(module)
    needs, allowed = STORAGE_ISAS[isa]
    if not allowed():
        return None, f"its {isa} micro-kernel needs {needs}, turned off here"
    return module, f"float32 FMA on operands widened while packed ({isa})"


def fused_storage_module(modules):
    """The fused storage GEMM where the storage path runs it here (:func:`storage_module`),
    or None where the float32 GEMM is MKL's: MKL's packed GEMM on operands widened a piece at
    a time (``bf16_packed.py``) runs there instead (on the 2-core Emerald Rapids the AVX-512
    fused GEMM reached about 0.75x of MKL's sgemm in process; on the 2-core Zen 3 the AVX2 one
    runs nanoGPT's nine products within 3% of the packed path, either way)."""
    if isinstance(modules.gemm, MKLGemm):
        return None
    return storage_module(modules)[0]


def to_bf16(modules, src, out=None):
    """float32 array ``src`` -> bf16 bit patterns (``out``, uint16 of src's shape, or new)."""
    src = np.ascontiguousarray(src, dtype=F32)
    out = np.empty(src.shape, BF16) if out is None else out
    module = modules.variant("bf16_cast")
    if module is None or not out.flags.c_contiguous:
        out[...] = f32_to_bf16(src)
        return out
    module.lib.nl_f32_to_bf16(module.ffi.cast("float *", src.ctypes.data),
                              module.ffi.cast("uint16_t *", out.ctypes.data), src.size)
    return out


def from_bf16(modules, src, out=None):
    """bf16 bit patterns ``src`` -> float32 (``out``, float32 of src's shape, or new)."""
    src = np.ascontiguousarray(src, dtype=BF16)
    out = np.empty(src.shape, F32) if out is None else out
    module = modules.variant("bf16_cast")
    if module is None or not out.flags.c_contiguous:
        out[...] = bf16_to_f32(src)
        return out
    module.lib.nl_bf16_to_f32(module.ffi.cast("uint16_t *", src.ctypes.data),
                              module.ffi.cast("float *", out.ctypes.data), src.size)
    return out


def check_gemm_operands(a, b, c, trans_a, trans_b):
    """Raise ValueError (one line: which operand, what it is, what was expected) unless ``a``
    and ``b`` are 2-D bf16 (uint16) arrays with unit-stride rows, ``c`` a 2-D float32 array
    with unit-stride rows, none with rows that overlap (a broadcast view would make the
    storage path's widened copy far larger than the memory the operand holds, and C's rows
    would be written twice), and op(a) (m, k) @ op(b) (k, n) fits c (m, n)."""
    for name, x, dtype in (("A", a, BF16), ("B", b, BF16), ("C", c, F32)):
        if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != dtype:
            raise ValueError(f"dot_bf16: {name} must be a 2-D {dtype.name} array"
                             f"{' (bf16 bit patterns)' if dtype == BF16 else ''}, got "
                             f"{getattr(x, 'dtype', type(x).__name__)} of shape "
                             f"{getattr(x, 'shape', '?')}")
        rows_apart = x.strides[0] >= x.shape[1] * x.itemsize or x.shape[0] == 1
        if x.strides[1] != x.itemsize or x.strides[0] % x.itemsize or not rows_apart:
            raise ValueError(f"dot_bf16: {name} must have unit-stride rows that do not overlap "
                             f"(shape {x.shape}, strides {x.strides}: a broadcast or strided "
                             f"view); pass a copy")
    m, k = a.shape[::-1] if trans_a else a.shape
    k2, n = b.shape[::-1] if trans_b else b.shape
    if k != k2 or c.shape != (m, n):
        raise ValueError(f"dot_bf16: op(A) is {m}x{k}, op(B) {k2}x{n}, C {c.shape[0]}x"
                         f"{c.shape[1]}; expected op(A) (m, k) @ op(B) (k, n) into C (m, n)")


def _work(module, area, size_of, m, n, threads):
    """The packing buffers' pointer for a kernel's call: ``area`` (a
    :class:`~.bf16_packed.SharedArea`, grown to ``size_of(m, n, threads)`` bytes) or NULL,
    where the kernel allocates them for the call."""
    if area is None:
        return module.ffi.NULL
    area.ensure(module.ffi, -(-int(size_of(m, n, threads)) // F32.itemsize))
    return area.pointer


def gemm_bf16(module, a, b, c, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, threads=0,
              bits=None, area=None):
    """c = alpha * op(a) @ op(b) + beta * c on the bf16 instructions (``module`` from
    :func:`gemm_module`); operands as :func:`check_gemm_operands` wants (checked by the
    caller).  ``threads`` 0: OpenMP's default.  ``bits``: a bf16 array of c's shape with
    unit-stride rows, which the GEMM's epilogue fills with c rounded to nearest even.
    ``area``: the :class:`~.bf16_packed.SharedArea` the packing buffers are kept in (None: the
    kernel allocates them for this call)."""
    m, k = a.shape[::-1] if trans_a else a.shape
    n = c.shape[1]
    ffi = module.ffi
    work = _work(module, area, module.lib.nl_gemm_bf16_work_bytes, m, n, int(threads))
    status = module.lib.nl_gemm_bf16_to(
        ffi.cast("uint16_t *", a.ctypes.data), ffi.cast("uint16_t *", b.ctypes.data),
        ffi.cast("float *", c.ctypes.data),
        ffi.NULL if bits is None else ffi.cast("uint16_t *", bits.ctypes.data), m, n, k,
        a.strides[0] // 2, b.strides[0] // 2, c.strides[0] // 4,
        0 if bits is None else bits.strides[0] // 2, int(trans_a), int(trans_b), float(alpha),
        float(beta), int(threads), work)
    if status == -2:
        raise MemoryError(f"dot_bf16: no memory for the packed operands of a {m}x{k} @ "
                          f"{k}x{n} product")
    if status != 0:
        raise RuntimeError(f"dot_bf16: the bf16 GEMM refused the call ({status}: -1 not built "
                           f"for this CPU, -4 its work area not on a 64-byte boundary)")
    return c


def gemm_bf16_callee(module):
    """``(address, work bytes)`` of ``module``'s bf16 GEMM (``nl_gemm_bf16_to``) as the C
    kernels that call it per tile on one thread take it: its address as an integer, and one
    thread's packing buffers in bytes (the same for every shape on one thread)."""
    ffi = module.ffi
    return (int(ffi.cast("intptr_t", ffi.addressof(module.lib, "nl_gemm_bf16_to"))),
            int(module.lib.nl_gemm_bf16_work_bytes(1, 1, 1)))


def _rows(x):
    """The row stride of a 2-D array with unit-stride rows, in elements (0 for None)."""
    return 0 if x is None else x.strides[0] // x.itemsize


def gemm_storage_fused(module, a, b, c, bits, alpha=1.0, beta=0.0, trans_a=False,
                       trans_b=False, threads=0, area=None):
    """The storage path's product on :func:`storage_module`'s kernel: ``a`` and ``b`` each
    bf16 (uint16 bits) or float32, 2-D with unit-stride rows; the result into float32 ``c``,
    into bf16 ``bits`` (rounded to nearest even in the epilogue), or both; ``c`` may be None
    only where k is at most ``nl_gemm_storage_kc()`` (beta then reads ``bits``).  ``area``:
    the :class:`~.bf16_packed.SharedArea` the packing buffers are kept in (None: the kernel
    allocates them for this call).  Shapes and strides checked by the caller; returns ``c``
    or ``bits``."""
    m, k = a.shape[::-1] if trans_a else a.shape
    out = bits if c is None else c
    n = out.shape[1]
    ffi = module.ffi
    work = _work(module, area, module.lib.nl_gemm_storage_work_bytes, m, n, int(threads))
    status = module.lib.nl_gemm_storage(
        ffi.cast("void *", a.ctypes.data), int(a.dtype == BF16),
        ffi.cast("void *", b.ctypes.data), int(b.dtype == BF16),
        ffi.NULL if c is None else ffi.cast("float *", c.ctypes.data),
        ffi.NULL if bits is None else ffi.cast("uint16_t *", bits.ctypes.data), m, n, k,
        _rows(a), _rows(b), _rows(c), _rows(bits), int(trans_a), int(trans_b), float(alpha),
        float(beta), int(threads), work)
    if status == -2:
        raise MemoryError(f"compound_dot: no memory for the packed operands of a {m}x{k} @ "
                          f"{k}x{n} product")
    if status != 0:
        raise RuntimeError(f"compound_dot: the storage GEMM refused the call ({status})")
    return out


def gemm_storage(modules, a, b, c, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
                 scratch=None, matmul=None):
    """The same product with float32 arithmetic: a and b widened to float32 (exactly; kept in
    ``scratch`` by shape), then the backend's float32 GEMM (``modules.gemm``, or ``matmul(a,
    b, out)`` where given)."""
    scratch = {} if scratch is None else scratch
    wide = []
    for which, x in (("A", a), ("B", b)):
        key = ("bf16-widened", which, x.shape)
        buf = scratch.get(key)
        if buf is None:
            buf = scratch[key] = np.empty(x.shape, F32)
        wide.append(from_bf16(modules, x, buf))
    wa = wide[0].T if trans_a else wide[0]
    wb = wide[1].T if trans_b else wide[1]
    gemm_into(c, wa, wb, alpha, beta, scratch, matmul or modules.gemm.matmul)
    return c
