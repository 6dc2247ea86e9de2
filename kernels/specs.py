"""The declarative table of kernel variants that the builder compiles.

A variant is one compilation of one real source file with a fixed set of ``-D`` defines:

* CPU variants (``kernels/cpu/*.c``) are compiled by the C compiler into one cffi module each
  (API mode).  ``header`` names the file of prototypes handed to cffi's ``cdef``; it may use the
  element type ``real``, which the builder declares as the variant's ``DTYPE`` define.
* CUDA variants (``kernels/cuda/*.cu``) are compiled by nvcc into a cubin per target arch
  (``-cubin -arch=sm_XX``).  ``threads`` is the block size and ``shared`` the dynamic shared
  memory in bytes a launch of the variant uses; ``functions`` names its ``extern "C"`` kernels.

Sources may ``#include "..."`` files of their own directory; those files are part of a variant's
cache key.  The CPU rows are :data:`CPU_VARIANTS` below; the GPU backend's rows live in
``cuda_specs.py`` (``CUDA_VARIANTS``), which :func:`variants` reads when it exists.
"""
import importlib
from dataclasses import dataclass
from pathlib import Path

KERNEL_ROOT = Path(__file__).resolve().parent
TARGETS = ("cpu", "cuda")
DEFAULT_CUDA_ARCHS = ("sm_80", "sm_90")
CPU_DTYPES = {"f32": "float", "f64": "double"}


@dataclass(frozen=True)
class KernelSpec:
    """One kernel variant.

    Attributes:
        name (str): unique name, e.g. ``"pool_f32"``; entries in the cache start with it.
        target (str): ``"cpu"`` or ``"cuda"``.
        source (str): the source file, relative to ``root``.
        defines (tuple): ``(NAME, value)`` pairs passed as ``-DNAME=value``.
        header (str or None): CPU only: the prototypes given to cffi's ``cdef``.
        threads (int or None): CUDA only: threads per block of a launch.
        shared (int): CUDA only: dynamic shared memory per block, bytes.
        functions (tuple): CUDA only: the ``extern "C"`` kernels the cubin holds.
        root (Path): the folder ``source`` and ``header`` are relative to (``kernels/``).
    """

    name: str
    target: str
    source: str
    defines: tuple = ()
    header: str = None
    threads: int = None
    shared: int = 0
    functions: tuple = ()
    root: Path = KERNEL_ROOT

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"kernel variant {self.name!r}: target must be one of {TARGETS}, "
                             f"got {self.target!r}")
        if self.target == "cpu" and self.header is None:
            raise ValueError(f"kernel variant {self.name!r}: a CPU variant needs a header of "
                             f"prototypes for cffi")
        object.__setattr__(self, "defines", tuple((str(k), str(v)) for k, v in self.defines))

    @property
    def source_path(self):
        return Path(self.root) / self.source

    @property
    def header_path(self):
        return None if self.header is None else Path(self.root) / self.header

    def define(self, name, default=None):
        """The value of define ``name`` (a string), or ``default``."""
        return dict(self.defines).get(name, default)


def _cpu_variants(stem):
    """The float32 and float64 variants of C source ``cpu/<stem>.c``."""
    return tuple(KernelSpec(f"{stem}_{suffix}", "cpu", f"cpu/{stem}.c", (("DTYPE", ctype),),
                            header=f"cpu/{stem}.h")
                 for suffix, ctype in CPU_DTYPES.items())


CPU_SOURCES = ("conv", "conv_direct", "pool", "norm", "softmax", "optree", "gelu", "attention_softmax",
               "rows", "blocksparse", "recurrent", "lrn", "fused_optim", "flash_attention")
CPU_VARIANTS = tuple(spec for stem in CPU_SOURCES for spec in _cpu_variants(stem))


def _cuda_variants():
    try:
        module = importlib.import_module(".cuda_specs", __package__)
    except ModuleNotFoundError as err:
        if err.name != f"{__package__}.cuda_specs":
            raise
        return ()
    return tuple(module.CUDA_VARIANTS)


def variants(target=None):
    """Every variant in the table, or only those of ``target`` ('cpu' or 'cuda')."""
    if target is not None and target not in TARGETS:
        raise ValueError(f"unknown kernel target {target!r}; expected one of {TARGETS}")
    table = CPU_VARIANTS + (_cuda_variants() if target != "cpu" else ())
    return tuple(spec for spec in table if target is None or spec.target == target)


def find(name):
    """The variant called ``name``; ``KeyError`` lists the known names."""
    for spec in variants():
        if spec.name == name:
            return spec
    raise KeyError(f"no kernel variant {name!r}; known: {', '.join(s.name for s in variants())}")


def cpu_variant(stem, dtype):
    """The CPU variant of source ``stem`` for numpy dtype ``dtype`` (float32 or float64)."""
    suffix = {"float32": "f32", "float64": "f64"}.get(str(dtype))
    if suffix is None:
        raise KeyError(f"the C kernels are compiled for float32 and float64, not {dtype}")
    return find(f"{stem}_{suffix}")
