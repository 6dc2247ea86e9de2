"""Compilers: finding them, asking their version and target, and running them.

Every compiler runs with an argument list (never a shell string).  A failed compile raises
:class:`CompileError`, which carries the numbered source and the compiler's log.

Where the compilers come from:

* C: ``NEONLITE_CC`` (may hold extra words, e.g. ``"ccache gcc"``), else ``CC``, else the first
  of ``cc``, ``gcc``, ``clang`` on ``PATH``.
* CUDA: ``NEONLITE_NVCC``, else ``nvcc`` on ``PATH``, else ``$CUDA_HOME/bin/nvcc``.

What a cache key takes from the machine is found once per process (and compiler), under a
lock, and kept as frozen values (:class:`CCompiler`, :class:`CudaCompiler`,
:class:`CKeyInputs`): build threads only read them.  ``sysconfig`` fills its table lazily
and not thread-safely (a thread could read ``EXT_SUFFIX`` as None while another filled it), so
nothing here asks it from a build thread.
"""
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..atomic import scratch_folder

C_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fPIC", "-shared")
CUDA_FLAGS = ("-O3", "-Xptxas", "-v")
COMPILE_TIMEOUT_S = 600
#: held while a compiler is probed or the key inputs are made, so each is made once
_PROBE_LOCK = threading.RLock()


class CompilerNotFound(RuntimeError):
    """No usable compiler for a target; the message says which one was looked for."""


class CompileError(RuntimeError):
    """A kernel failed to compile.

    Attributes: ``name`` (the variant), ``source`` (its text), ``log`` (the compiler's output),
    ``command`` (the argument list that ran) and ``returncode``.
    """

    def __init__(self, name, source, log, command, returncode):
        self.name, self.source, self.log = name, source, log
        self.command, self.returncode = list(command), returncode
        super().__init__(name)

    def numbered_source(self):
        """The source with 1-based line numbers, as a compiler's messages cite them."""
        lines = self.source.splitlines()
        width = len(str(len(lines)))
        return "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, 1))

    def __str__(self):
        return (f"compiling kernel {self.name!r} failed (exit status {self.returncode}):\n"
                f"$ {shlex.join(self.command)}\n"
                f"--- source ---\n{self.numbered_source()}\n"
                f"--- compiler log ---\n{self.log.rstrip()}")


def _run(command, cwd=None, env=None):
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=COMPILE_TIMEOUT_S, check=False)
    except OSError as err:
        raise CompilerNotFound(f"cannot run {command[0]!r}: {err}") from err
    except subprocess.TimeoutExpired as err:
        return 124, f"{command[0]} did not finish within {COMPILE_TIMEOUT_S} s\n{err.stdout or ''}"
    return done.returncode, (done.stdout or "") + (done.stderr or "")


def _resolve(words, what, env):
    path = shutil.which(words[0])
    if path is None:
        raise CompilerNotFound(f"{what} {words[0]!r} (from {env}) is not an executable on PATH")
    return (path, *words[1:])


@dataclass(frozen=True)
class CCompiler:
    """A C compiler: ``command`` (argument list prefix), ``version`` (its first version line)
    and ``target`` (an id of the CPU that ``-march=native`` compiles for)."""

    command: tuple
    version: str
    target: str

    def compile_module(self, name, c_file, out_file, include_dirs=(), defines=(), source=None,
                       libraries=()):
        """Compile C file ``c_file`` (a cffi module) into shared object ``out_file``, linked
        with ``libraries`` (names, as ``-l`` takes them) besides libm.

        Returns the compiler's log; raises :class:`CompileError` (showing ``source``, the text
        the user wrote, when given) if the compiler fails.
        """
        includes = [python_build()[1], *map(str, include_dirs)]
        command = [*self.command, *C_FLAGS, *(f"-I{d}" for d in includes),
                   *(f"-D{k}={v}" for k, v in defines), str(c_file), "-o", str(out_file),
                   *(f"-l{lib}" for lib in libraries), "-lm"]
        status, log = _run(command, cwd=Path(c_file).parent)
        if status != 0 or not Path(out_file).is_file():
            text = source if source is not None else Path(c_file).read_text()
            raise CompileError(name, text, log, command, status)
        return log


    def links(self, library, header):
        """True when a program including system header ``header`` compiles and links with
        ``-l<library>`` (asked once per compiler, library and header in a process)."""
        return _links(self.command, library, header)


@functools.lru_cache(maxsize=None)
def _links(command, library, header):
    with scratch_folder("neonlite-probe-") as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text(f"#include <stddef.h>\n#include <stdio.h>\n#include <{header}>\n"
                          f"int main(void) {{ return 0; }}\n")
        status, _ = _run([*command, str(source), "-o", str(Path(tmp) / "probe"),
                          f"-l{library}"], cwd=tmp, env=_probe_environment())
    return status == 0


def _probe_environment():
    """The environment the compiler is asked questions in: the C locale (untranslated
    output) and no ``COLUMNS``; with stdin not a terminal either (see :func:`_run`), gcc does
    not wrap its help text at any width."""
    env = {k: v for k, v in os.environ.items()
           if k != "COLUMNS" and not k.startswith("LC_") and k != "LANGUAGE"}
    env.update(LANG="C", LC_ALL="C")
    return env


_OPTION = re.compile(r"^\s*(-[^\s=]+=?)\s*(.*?)\s*$")


def target_options(text):
    """The sorted ``(option, value)`` pairs of gcc's ``-Q --help=target`` output (``value`` is
    ``[enabled]``, ``[disabled]``, a number or a name), or, for a compiler without that
    option, the ``-target-cpu``/``-target-feature`` words of ``-###``: what decides the
    machine code, with the layout (line wrapping, padding) left out."""
    pairs = set()
    for line in text.splitlines():
        found = _OPTION.match(line)
        if found and not line.lstrip().startswith("Known valid"):
            pairs.add((found.group(1), " ".join(found.group(2).split())))
    words = re.findall(r'"(-target-cpu|-target-feature)"\s+"([^"]+)"', text)
    return sorted(pairs | set(words))


@functools.lru_cache(maxsize=None)
def _probe_c(command):
    env = _probe_environment()
    status, out = _run([*command, "--version"], env=env)
    if status != 0:
        raise CompilerNotFound(f"C compiler {command[0]!r} does not run: {out.strip()[:200]}")
    version = out.strip().splitlines()[0] if out.strip() else command[0]
    status, target = _run([*command, "-march=native", "-Q", "--help=target"], env=env)
    if status != 0:
        status, target = _run([*command, "-march=native", "-###", "-x", "c", "-c", os.devnull],
                              env=env)
    options = target_options(target)
    march = dict(options).get("-march=") or dict(options).get("-target-cpu")
    digest = hashlib.sha256(repr(options).encode()).hexdigest()[:12]
    return CCompiler(command, version, f"{march or 'native'}-{digest}")


def find_c_compiler():
    """The C compiler to use (see the module docstring); raises :class:`CompilerNotFound`."""
    with _PROBE_LOCK:
        return _find_c_compiler()


def _find_c_compiler():
    for env in ("NEONLITE_CC", "CC"):
        value = os.environ.get(env, "").strip()
        if value:
            return _probe_c(_resolve(shlex.split(value), "C compiler", env))
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return _probe_c((shutil.which(name),))
    raise CompilerNotFound("no C compiler: none of cc, gcc, clang is on PATH (set NEONLITE_CC)")


_PTXAS_FUNC = re.compile(r"Function properties for (\S+)")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                          r"loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log):
    """``{function: {"registers", "shared", "spill_stores", "spill_loads", "stack"}}`` from the
    output of ``ptxas -v`` (integers; shared memory is the static ``smem`` in bytes)."""
    info, current = {}, None
    for line in log.splitlines():
        found = _PTXAS_FUNC.search(line)
        if found:
            current = found.group(1)
            info.setdefault(current, {"registers": 0, "shared": 0, "spill_stores": 0,
                                      "spill_loads": 0, "stack": 0})
            continue
        if current is None:
            continue
        found = _PTXAS_SPILL.search(line)
        if found:
            stack, stores, loads = map(int, found.groups())
            info[current].update(stack=stack, spill_stores=stores, spill_loads=loads)
            continue
        found = _PTXAS_USED.search(line)
        if found:
            info[current]["registers"] = int(found.group(1))
            info[current]["shared"] = int(found.group(2) or 0)
    return info


@dataclass(frozen=True)
class CudaCompiler:
    """nvcc: ``command`` (argument list prefix) and ``version`` (its release line)."""

    command: tuple
    version: str

    def compile_cubin(self, name, cu_file, out_file, arch, include_dirs=(), defines=()):
        """Compile ``cu_file`` for ``arch`` (e.g. ``"sm_80"``) into ``out_file``; returns the
        log (``ptxas -v`` included) or raises :class:`CompileError`."""
        if not re.fullmatch(r"sm_\d+[a-z]?", arch):
            raise ValueError(f"CUDA arch must look like 'sm_80', got {arch!r}")
        command = [*self.command, "-cubin", f"-arch={arch}", *CUDA_FLAGS,
                   *(f"-I{d}" for d in include_dirs), *(f"-D{k}={v}" for k, v in defines),
                   "-o", str(out_file), str(cu_file)]
        status, log = _run(command, cwd=Path(cu_file).parent)
        if status != 0 or not Path(out_file).is_file():
            raise CompileError(name, Path(cu_file).read_text(), log, command, status)
        return log


@functools.lru_cache(maxsize=None)
def _probe_nvcc(command):
    status, out = _run([*command, "--version"])
    if status != 0:
        raise CompilerNotFound(f"nvcc {command[0]!r} does not run: {out.strip()[:200]}")
    lines = [line for line in out.splitlines() if "release" in line] or out.splitlines()[-1:]
    return CudaCompiler(command, lines[0].strip() if lines else command[0])


def find_nvcc():
    """nvcc (see the module docstring); raises :class:`CompilerNotFound`."""
    with _PROBE_LOCK:
        return _find_nvcc()


def _find_nvcc():
    value = os.environ.get("NEONLITE_NVCC", "").strip()
    if value:
        return _probe_nvcc(_resolve(shlex.split(value), "nvcc", "NEONLITE_NVCC"))
    path = shutil.which("nvcc")
    if path is None:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        candidate = Path(home) / "bin" / "nvcc"
        path = str(candidate) if candidate.is_file() else None
    if path is None:
        raise CompilerNotFound("nvcc not found on PATH or in $CUDA_HOME/bin (set NEONLITE_NVCC)")
    return _probe_nvcc((path,))


@functools.lru_cache(maxsize=None)
def _python_build():
    import sysconfig
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or sys.implementation.cache_tag
    return suffix, sysconfig.get_paths()["include"]


def python_build():
    """``(EXT_SUFFIX, the folder of Python.h)``: what a C extension is built for and with,
    read from ``sysconfig`` once per process (under the probe lock)."""
    with _PROBE_LOCK:
        return _python_build()


@dataclass(frozen=True)
class CKeyInputs:
    """Everything a CPU variant's cache key takes besides the variant itself: the
    ``compiler`` (its version and target), the ``flags``, the Python extension suffix
    ``ext_suffix`` (the ABI the module is built for) and ``cffi_version``.  Made by
    :func:`c_key_inputs` before any build thread starts; threads only read it."""

    compiler: CCompiler
    flags: tuple
    ext_suffix: str
    cffi_version: str


@functools.lru_cache(maxsize=None)
def _c_key_inputs(compiler):
    import cffi
    return CKeyInputs(compiler, C_FLAGS, python_build()[0], cffi.__version__)


def c_key_inputs():
    """The :class:`CKeyInputs` of the C compiler found now (one value per compiler and
    process); raises :class:`CompilerNotFound`."""
    with _PROBE_LOCK:
        return _c_key_inputs(find_c_compiler())
