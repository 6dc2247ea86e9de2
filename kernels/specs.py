"""The declarative table of kernel variants that the builder compiles.

A variant is one compilation of one real source file with a fixed set of ``-D`` defines:

* CPU variants (``kernels/cpu/*.c``) are compiled by the C compiler into one cffi module each
  (API mode).  ``header`` names the file of prototypes handed to cffi's ``cdef``; it may use the
  element type ``real``, which the builder declares as the variant's ``DTYPE`` define.  A
  source works on floats (a float32 and a float64 variant) or, if listed in
  :data:`UINT8_SOURCES`, on uint8 images (one ``_u8`` variant, ``real`` = ``uint8_t``).
* CUDA variants (``kernels/cuda/*.cu``) are compiled by nvcc into a cubin per target arch
  (``-cubin -arch=sm_XX``).  ``threads`` is the block size and ``shared`` the dynamic shared
  memory in bytes a launch of the variant uses; ``functions`` names its ``extern "C"`` kernels.

Sources may ``#include "..."`` files of their own directory; those files are part of a variant's
cache key.  The CPU rows are :data:`CPU_VARIANTS` below, two per float source of ``kernels/cpu/*.c``
and one per uint8 source; the GPU backend's rows live in
``cuda_specs.py`` (``CUDA_VARIANTS``); :func:`variants` and :func:`find` search both.  A variant
is a :class:`~neonlite.kernels.kernel_spec.KernelSpec`.
"""
from .cuda_specs import CUDA_VARIANTS
from .kernel_spec import CPU_DTYPES, DEFAULT_CUDA_ARCHS, KERNEL_ROOT, TARGETS, KernelSpec

#: the C sources of ``kernels/cpu/`` that work on uint8 data (augmentation), compiled once as
#: ``<stem>_u8``, not as float variants
UINT8_SOURCES = ("augment",)
UINT8_SUFFIX, UINT8_CTYPE = "u8", "uint8_t"


def _cpu_variants(stem):
    """The float32 and float64 variants of C source ``cpu/<stem>.c``."""
    return tuple(KernelSpec(f"{stem}_{suffix}", "cpu", f"cpu/{stem}.c", (("DTYPE", ctype),),
                            header=f"cpu/{stem}.h")
                 for suffix, ctype in CPU_DTYPES.items())


def _uint8_variant(stem):
    """The uint8 variant of C source ``cpu/<stem>.c``."""
    return KernelSpec(f"{stem}_{UINT8_SUFFIX}", "cpu", f"cpu/{stem}.c",
                      (("DTYPE", UINT8_CTYPE),), header=f"cpu/{stem}.h")


#: every float C source of ``kernels/cpu/`` (each with its header of the same stem), found,
#: not listed: a kernel source added there is built with the others
CPU_SOURCES = tuple(sorted(p.stem for p in (KERNEL_ROOT / "cpu").glob("*.c")
                           if p.stem not in UINT8_SOURCES))
CPU_VARIANTS = tuple(spec for stem in CPU_SOURCES for spec in _cpu_variants(stem)) + \
    tuple(_uint8_variant(stem) for stem in UINT8_SOURCES)

#: the bfloat16 kernels of ``kernels/cpu/bf16/`` (float32 accumulation, one variant each, not
#: one per element type): the casts (plain C, every CPU), the VDPBF16PS GEMM (a working kernel
#: where ``-march=native`` enables AVX512-BF16, else a stub that says so), the AMX GEMM
#: (TDPBF16PS, its functions compiled for AMX; called only where AMX is granted), the same AMX
#: GEMM with its tile instructions done in C (``amx_emulated.h``: its tests run on every CPU;
#: never chosen by the backend), the convolutions' passes and the fused attention on a bf16
#: GEMM (``conv_compute``, ``attention_compute``: the compute path's) and the storage path's GEMM (float32 FMA on operands widened
#: while packed, a bf16 epilogue: a working kernel where ``-march=native`` enables AVX-512 or
#: AVX2 with FMA, else a stub)
BF16_VARIANTS = (
    KernelSpec("bf16_cast", "cpu", "cpu/bf16/bf16_cast.c", (("DTYPE", "float"),),
               header="cpu/bf16/bf16_cast.h"),
    KernelSpec("gemm_bf16", "cpu", "cpu/bf16/gemm_bf16.c", (("DTYPE", "float"),),
               header="cpu/bf16/gemm_bf16.h"),
    KernelSpec("gemm_bf16_amx", "cpu", "cpu/bf16/gemm_bf16.c",
               (("DTYPE", "float"), ("NL_BF16_AMX", "1")), header="cpu/bf16/gemm_bf16.h"),
    KernelSpec("gemm_bf16_amx_emulated", "cpu", "cpu/bf16/gemm_bf16.c",
               (("DTYPE", "float"), ("NL_BF16_AMX", "1"), ("NL_AMX_EMULATED", "1")),
               header="cpu/bf16/gemm_bf16.h"),
    KernelSpec("conv_compute", "cpu", "cpu/bf16/conv_compute.c", (("DTYPE", "float"),),
               header="cpu/bf16/conv_compute.h"),
    KernelSpec("attention_compute", "cpu", "cpu/bf16/attention_compute.c",
               (("DTYPE", "float"),), header="cpu/bf16/attention_compute.h"),
    KernelSpec("gemm_storage", "cpu", "cpu/bf16/gemm_storage.c", (("DTYPE", "float"),),
               header="cpu/bf16/gemm_storage.h"),
    KernelSpec("gemm_packed", "cpu", "cpu/bf16/gemm_packed.c", (("DTYPE", "float"),),
               header="cpu/bf16/gemm_packed.h"),
)


#: region-of-interest JPEG decoding with the system's libjpeg(-turbo) (``cpu/jpeg/``): linked
#: with ``-ljpeg`` where the compiler finds ``jpeglib.h`` and the library, else a stub that
#: says so (then Pillow decodes; ``neonlite doctor`` tells which)
JPEG_VARIANTS = (
    KernelSpec("jpeg_roi", "cpu", "cpu/jpeg/jpeg_roi.c", libraries=(("jpeg", "jpeglib.h"),),
               header="cpu/jpeg/jpeg_roi.h"),
)


def variants(target=None):
    """Every variant in the table, or only those of ``target`` ('cpu' or 'cuda')."""
    if target is not None and target not in TARGETS:
        raise ValueError(f"unknown kernel target {target!r}; expected one of {TARGETS}")
    table = CPU_VARIANTS + BF16_VARIANTS + JPEG_VARIANTS + (CUDA_VARIANTS if target != "cpu" else ())
    return tuple(spec for spec in table if target is None or spec.target == target)


def find(name):
    """The variant called ``name``; ``KeyError`` lists the known names."""
    for spec in variants():
        if spec.name == name:
            return spec
    raise KeyError(f"no kernel variant {name!r}; known: {', '.join(s.name for s in variants())}")


__all__ = ["KernelSpec", "KERNEL_ROOT", "TARGETS", "DEFAULT_CUDA_ARCHS", "CPU_DTYPES",
           "CPU_SOURCES", "CPU_VARIANTS", "BF16_VARIANTS", "JPEG_VARIANTS", "CUDA_VARIANTS", "UINT8_SOURCES",
           "variants", "find",
           "cpu_variant"]


def cpu_variant(stem, dtype):
    """The CPU variant of source ``stem`` for numpy dtype ``dtype`` (float32 or float64; uint8
    for a source of :data:`UINT8_SOURCES`)."""
    name = str(getattr(dtype, "__name__", dtype))
    suffix = {"float32": "f32", "float64": "f64"}.get(name)
    if stem in UINT8_SOURCES:
        suffix = UINT8_SUFFIX if name == "uint8" else None
    if suffix is None:
        raise KeyError(f"C source {stem} is compiled for "
                       f"{'uint8' if stem in UINT8_SOURCES else 'float32 and float64'}, not "
                       f"{dtype}")
    return find(f"{stem}_{suffix}")
