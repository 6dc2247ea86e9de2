"""The one kernel builder: compiles a variant of the table (``specs.py``) and caches it.

Two tiers: a :class:`Builder` keeps what it loaded in memory (per process; a CUDA binary is kept
as bytes, and the GPU backend keeps the modules it loads from them per device), in front of the
on-disk :class:`~neonlite.kernels.cache.DiskCache`.  A cache key hashes the source and its
includes, the defines and compiler flags, the target (CPU model or ``sm_XX``) and the
compiler's version (plus, for C, the Python ABI and the cffi version).

* C variants compile through cffi in API mode: cffi writes the module's C file (the ``cdef`` is
  the variant's header of prototypes), the C compiler builds it into a shared object, and the
  module is imported straight from its cache entry.
* CUDA variants compile with ``nvcc -cubin -arch=sm_XX``; the entry keeps the cubin and the
  per-function registers, shared memory and spills that ``ptxas -v`` reported.

Building is lazy (:meth:`Builder.load_cpu` and :meth:`Builder.cuda_binary` build on a cache
miss) or ahead of time (:meth:`Builder.build_all`, ``neonlite kernels build``).
"""
import contextlib
import importlib.machinery
import importlib.util
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..atomic import scratch_folder
from . import specs as _specs
from .cache import CorruptEntry, DiskCache, ForeignEntry, cache_key, entry_name, source_closure
from .toolchain import (CUDA_FLAGS, CompileError, CompilerNotFound, c_key_inputs, find_nvcc,
                        parse_ptxas)


@dataclass(frozen=True)
class CudaBinary:
    """A compiled CUDA variant: ``cubin`` bytes for ``arch``, and ``info`` from ``ptxas -v``
    (``{function: {"registers", "shared", "spill_stores", "spill_loads", "stack"}}``)."""

    spec: _specs.KernelSpec
    arch: str
    key: str
    cubin: bytes
    info: dict
    path: Path


@dataclass(frozen=True)
class BuildResult:
    """What :meth:`Builder.build_all` did for one variant: ``status`` is ``"built"``,
    ``"cached"`` or ``"failed"`` (then ``error`` holds the exception)."""

    spec: _specs.KernelSpec
    arch: str
    status: str
    error: Exception = None


def _closure(spec):
    files = source_closure(spec.source_path)
    if spec.header_path is not None:
        files += source_closure(spec.header_path)
    return files


_GUARD = re.compile(r"^\s*#\s*(ifndef|endif|define\s+\w+\s*$)")
_INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def _declarations(path, seen):
    """The lines of header ``path`` as cffi's ``cdef`` takes them: each ``#include "x.h"`` of a
    file beside it replaced by that file's declarations (once per file), include guards
    dropped (cffi parses no conditionals); ``#define NAME value`` constants stay."""
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    lines = []
    for line in path.read_text().splitlines():
        include = _INCLUDE_LINE.match(line)
        if include and (path.parent / include.group(1)).is_file():
            lines += _declarations(path.parent / include.group(1), seen)
        elif not _GUARD.match(line):
            lines.append(line)
    return lines


def _cdef(spec):
    """cffi declarations of a CPU variant: its header (local includes inlined, see
    :func:`_declarations`), with ``real`` typedef'd to DTYPE."""
    ctype = spec.define("DTYPE")
    prelude = f"typedef {ctype} real;\n" if ctype else ""
    return prelude + "\n".join(_declarations(spec.header_path, set())) + "\n"


def link_plan(spec, compiler):
    """``(defines, libraries)`` of CPU variant ``spec`` with ``compiler``: each of its
    ``libraries`` that ``compiler`` finds (header and ``-l``) is linked; for one it does not,
    ``NL_NO_LIB<NAME>=1`` joins the defines (the source builds its stub)."""
    defines, libraries = list(spec.defines), []
    for library, header in spec.libraries:
        if compiler.links(library, header):
            libraries.append(library)
        else:
            defines.append((f"NL_NO_LIB{library.upper()}", "1"))
    return tuple(defines), tuple(libraries)


def _import_extension(module_name, path):
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    module_spec = importlib.util.spec_from_loader(module_name, loader, origin=str(path))
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    return module


class Builder:
    """Builds kernel variants into ``cache`` (default: the directory of
    :func:`~neonlite.kernels.cache.cache_dir`) and memoizes the results in memory.

    ``stats`` counts ``compiled``, ``disk_hits``, ``memory_hits`` and ``corrupt`` (entries found
    damaged and rebuilt).  ``unavailable`` maps a target to the reason its kernels cannot be
    built in this process, and ``announced`` holds the targets whose users have said so once.
    ``compile_seconds`` is the wall time this builder has spent compiling (compilers running
    at once count once), so progress figures can leave it out.
    """

    def __init__(self, cache=None):
        self.cache = cache if isinstance(cache, DiskCache) else DiskCache(cache)
        self.unavailable = {}
        self.announced = set()
        self._memory = {}
        self._kept_fds = []
        self._lock = threading.Lock()
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "corrupt": 0}
        self.compile_seconds = 0.0
        self._compiling, self._compile_start = 0, 0.0

    def _count(self, what):
        with self._lock:
            self.stats[what] += 1

    @contextlib.contextmanager
    def compiling(self):
        """Count the wall time of the block in ``compile_seconds`` (nested and concurrent
        blocks count their union once)."""
        with self._lock:
            if self._compiling == 0:
                self._compile_start = time.perf_counter()
            self._compiling += 1
        try:
            yield
        finally:
            with self._lock:
                self._compiling -= 1
                if self._compiling == 0:
                    self.compile_seconds += time.perf_counter() - self._compile_start

    # ---- keys ------------------------------------------------------------------------------
    def cpu_key(self, spec, inputs=None):
        """The cache key of CPU variant ``spec`` from ``inputs`` (a
        :class:`~neonlite.kernels.toolchain.CKeyInputs`, default: those of the compiler found
        now), which hold every value the key takes from the machine."""
        inputs = inputs or c_key_inputs()
        defines, libraries = link_plan(spec, inputs.compiler)
        linked = {"libraries": libraries} if spec.libraries else {}
        return cache_key({"target": "cpu", "variant": spec.name, "sources": _closure(spec),
                          "defines": defines, "flags": inputs.flags,
                          "arch": inputs.compiler.target, "compiler": inputs.compiler.version,
                          "python": inputs.ext_suffix, "cffi": inputs.cffi_version, **linked})

    def cuda_key(self, spec, arch, nvcc=None):
        """The cache key of CUDA variant ``spec`` for ``arch`` with ``nvcc``."""
        nvcc = nvcc or find_nvcc()
        return cache_key({"target": "cuda", "variant": spec.name, "sources": _closure(spec),
                          "defines": spec.defines, "flags": CUDA_FLAGS, "arch": arch,
                          "compiler": nvcc.version})

    def _read(self, filename, key):
        """``(payload, meta)`` of a good entry under ``key``, else None (corrupt ones counted)."""
        try:
            entry = self.cache.read(filename)
        except CorruptEntry:
            self._count("corrupt")
            return None
        if entry is None or entry[1].get("key") != key:
            return None
        return entry

    # ---- C -----------------------------------------------------------------------------------
    def ensure_cpu(self, spec, inputs=None):
        """Compile CPU variant ``spec`` unless a good entry exists; returns
        ``(entry path, module name, compiled?)``.  ``inputs``: as :meth:`cpu_key` takes."""
        inputs = inputs or c_key_inputs()
        compiler = inputs.compiler
        key = self.cpu_key(spec, inputs)
        filename = entry_name(spec.name, key, ".so")
        module_name = f"_nlk_{spec.name}_{key[:16]}"
        if self._read(filename, key) is not None:
            self._count("disk_hits")
            return self.cache.path(filename), module_name, False
        with self.compiling():
            payload, log = self._compile_cpu(spec, compiler, module_name)
        meta = {"variant": spec.name, "target": "cpu", "key": key, "module": module_name,
                "arch": compiler.target, "compiler": compiler.version,
                "defines": dict(spec.defines), "log": log[-4000:]}
        path = self.cache.write(filename, payload, meta)
        self._count("compiled")
        return path, module_name, True

    def _compile_cpu(self, spec, compiler, module_name):
        import cffi
        from cffi.recompiler import make_c_source
        source_text = spec.source_path.read_text()
        ffi = cffi.FFI()
        try:
            ffi.cdef(_cdef(spec))
        except cffi.CDefError as err:
            raise CompileError(spec.name, _cdef(spec), f"cffi cannot parse the header "
                               f"{spec.header}: {err}", ["cffi.FFI.cdef", spec.header], 1) from None
        with scratch_folder("neonlite-kernel-") as tmp:
            c_file = Path(tmp) / f"{module_name}.c"
            make_c_source(ffi, module_name, f'#include "{spec.source_path.name}"\n', str(c_file),
                          verbose=False)
            out = Path(tmp) / f"{module_name}.so"
            defines, libraries = link_plan(spec, compiler)
            log = compiler.compile_module(spec.name, c_file, out, [spec.source_path.parent],
                                          defines, source=source_text, libraries=libraries)
            return out.read_bytes(), log

    def load_cpu(self, spec):
        """The cffi module (``.ffi``, ``.lib``) of CPU variant ``spec``, built if needed.

        Raises :class:`~neonlite.kernels.toolchain.CompilerNotFound` when there is no C
        compiler and :class:`~neonlite.kernels.toolchain.CompileError` when the source fails.
        """
        module = self._memory.get(("cpu", spec))
        if module is not None:
            self._count("memory_hits")
            return module
        inputs = c_key_inputs()
        path, module_name, compiled = self.ensure_cpu(spec, inputs)
        try:
            module = self._import_entry(path.name, module_name)
        except ImportError:
            if compiled:
                raise
            self._count("corrupt")
            self.cache.path(path.name).unlink(missing_ok=True)
            path, module_name, _ = self.ensure_cpu(spec, inputs)
            module = self._import_entry(path.name, module_name)
        self._memory[("cpu", spec)] = module
        return module

    def _import_entry(self, filename, module_name):
        """Import the module of entry ``filename`` from the file descriptor its owner, mode
        and checksum were checked on (``/proc/self/fd/N`` where the system has it), so a file
        swapped in after the check is never loaded.  The descriptor stays open for the
        process's life: the dynamic loader knows a library by its path, and a reused
        descriptor number must never name another one."""
        try:
            with self.cache.opened(filename) as entry:
                if entry is None or entry[2].get("module") != module_name:
                    raise ImportError(f"kernel cache entry {filename} is gone or changed")
                fd = os.dup(entry[0])
        except CorruptEntry as err:
            raise ImportError(f"kernel cache entry {filename}: {err}") from None
        self._kept_fds.append(fd)
        by_fd = f"/proc/self/fd/{fd}"
        return _import_extension(module_name, by_fd if os.path.exists(by_fd) else
                                 self.cache.path(filename))

    # ---- CUDA --------------------------------------------------------------------------------
    def cuda_binary(self, spec, arch):
        """The :class:`CudaBinary` of CUDA variant ``spec`` for ``arch``, built if needed.

        Raises :class:`~neonlite.kernels.toolchain.CompilerNotFound` without nvcc and
        :class:`~neonlite.kernels.toolchain.CompileError` when the source fails.
        """
        return self._cuda(spec, arch)[0]

    def _cuda(self, spec, arch, nvcc=None):
        nvcc = nvcc or find_nvcc()
        key = self.cuda_key(spec, arch, nvcc)
        binary = self._memory.get(("cuda", key))
        if binary is not None:
            self._count("memory_hits")
            return binary, False
        filename = entry_name(spec.name, key, ".cubin", arch)
        entry = self._read(filename, key)
        compiled = entry is None
        if entry is not None:
            self._count("disk_hits")
            payload, meta = entry
        else:
            with self.compiling():
                payload, meta = self._compile_cuda(spec, arch, nvcc, key)
            self.cache.write(filename, payload, meta)
            self._count("compiled")
        binary = CudaBinary(spec, arch, key, payload, meta["ptxas"], self.cache.path(filename))
        self._memory[("cuda", key)] = binary
        return binary, compiled

    def _compile_cuda(self, spec, arch, nvcc, key):
        with scratch_folder("neonlite-kernel-") as tmp:
            out = Path(tmp) / f"{spec.name}.cubin"
            log = nvcc.compile_cubin(spec.name, spec.source_path, out, arch,
                                     [spec.source_path.parent], spec.defines)
            payload = out.read_bytes()
        meta = {"variant": spec.name, "target": "cuda", "key": key, "arch": arch,
                "compiler": nvcc.version, "defines": dict(spec.defines),
                "threads": spec.threads, "shared": spec.shared,
                "functions": list(spec.functions), "ptxas": parse_ptxas(log), "log": log[-4000:]}
        return payload, meta

    # ---- ahead of time -----------------------------------------------------------------------
    def status(self, spec, arch=None):
        """``(cached?, meta or reason)`` of variant ``spec`` (CUDA: for ``arch``) without
        building it; the reason says why it is not cached (or why that cannot be known)."""
        try:
            if spec.target == "cpu":
                key = self.cpu_key(spec)
                filename = entry_name(spec.name, key, ".so")
            else:
                key = self.cuda_key(spec, arch)
                filename = entry_name(spec.name, key, ".cubin", arch)
        except (OSError, RuntimeError, ImportError) as err:
            return False, str(err)
        try:
            entry = self.cache.read(filename)
        except ForeignEntry as err:
            return False, f"another user's entry ({err}), never loaded; yours replaces it on " \
                f"next use"
        except CorruptEntry as err:
            return False, f"corrupt entry ({err}); it is rebuilt on next use"
        if entry is None:
            return False, "not built"
        return True, entry[1]

    def build_all(self, target="cpu", archs=_specs.DEFAULT_CUDA_ARCHS, jobs=1, variants=None,
                  progress=None):
        """Build every variant of ``target`` (CUDA: for each arch in ``archs``) with ``jobs``
        compilers at once; returns one :class:`BuildResult` per (variant, arch).
        ``progress(done, total)`` is called after each one finishes."""
        chosen = variants if variants is not None else _specs.variants(target)
        work = [(spec, arch) for spec in chosen
                for arch in ((None,) if spec.target == "cpu" else tuple(archs))]
        tools = _key_inputs({spec.target for spec, _ in work})

        def one(item):
            spec, arch = item
            if isinstance(tools[spec.target], Exception):
                return BuildResult(spec, arch, "failed", tools[spec.target])
            try:
                if spec.target == "cpu":
                    compiled = self.ensure_cpu(spec, tools["cpu"])[2]
                else:
                    compiled = self._cuda(spec, arch, tools["cuda"])[1]
            except (CompileError, RuntimeError, OSError) as err:
                return BuildResult(spec, arch, "failed", err)
            return BuildResult(spec, arch, "built" if compiled else "cached")

        finished = [0]

        def counted(item):
            result = one(item)
            if progress is not None:
                with self._lock:
                    finished[0] += 1
                    progress(finished[0], len(work))
            return result

        with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as pool, self.compiling():
            return list(pool.map(counted, work))


def _key_inputs(targets):
    """``{target: what its keys take from the machine}`` for ``targets``, made before any
    build thread starts (C: :class:`~neonlite.kernels.toolchain.CKeyInputs`, CUDA: the
    :class:`~neonlite.kernels.toolchain.CudaCompiler`), or the ``CompilerNotFound`` that
    each of the target's variants then reports."""
    found = {}
    for target in targets:
        try:
            found[target] = c_key_inputs() if target == "cpu" else find_nvcc()
        except CompilerNotFound as err:
            found[target] = err
    return found


_default = None


def compile_seconds():
    """Wall seconds the process's builder has spent compiling (0.0 before it exists)."""
    return 0.0 if _default is None else _default.compile_seconds


def default_builder():
    """The process's builder (its memory tier is the one piece of kernel state a process
    keeps); its disk cache follows ``NEONLITE_CACHE_DIR`` as set at each call."""
    global _default
    if _default is None:
        _default = Builder()
    return _default
