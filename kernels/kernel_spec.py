"""One kernel variant (:class:`KernelSpec`): one compilation of one real source file under
``kernels/`` with a fixed set of ``-D`` defines.  The table of every variant is ``specs.py``."""
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
        libraries (tuple): CPU only: ``(library, header)`` pairs of system libraries the
            variant links (``-l<library>``) where the compiler finds ``<header>`` and links
            them; where it does not, the variant is compiled with ``-DNL_NO_LIB<LIBRARY>``
            instead (its source then builds a stub that says so).
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
    libraries: tuple = ()
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
        object.__setattr__(self, "libraries", tuple((str(lib), str(header))
                                                    for lib, header in self.libraries))

    @property
    def source_path(self):
        return Path(self.root) / self.source

    @property
    def header_path(self):
        return None if self.header is None else Path(self.root) / self.header

    def define(self, name, default=None):
        """The value of define ``name`` (a string), or ``default``."""
        return dict(self.defines).get(name, default)
