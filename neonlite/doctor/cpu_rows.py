"""The rows of ``neonlite doctor`` about the CPU side: Python and numpy, the BLAS, the C compiler
(with a test kernel compiled with the project's flags, and OpenMP), the CPU and its instruction
sets, and MPI.  Every check catches what it probes for, so a broken piece is a row, never a
traceback."""
import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .report import ABSENT, FAIL, OK, WARN, Row, one_line

# (name in the table, /proc/cpuinfo flag)
INSTRUCTION_SETS = (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX512-BF16", "avx512_bf16"),
                    ("AMX-BF16", "amx_bf16"))
_TEST_KERNEL = """
#include <omp.h>
int nl_doctor_omp_threads(void) {
    int n = 0;
    #pragma omp parallel
    {
        #pragma omp single
        n = omp_get_num_threads();
    }
    return n;
}
"""
NO_KERNELS = "until then the cpu backend runs on numpy alone (slower) and says so once"


def python_rows():
    import numpy as np
    return [Row("Python", OK, f"{platform.python_version()} ({sys.executable})"),
            Row("numpy", OK, np.__version__)]


def _mkl_details():
    """(version text, max threads) of the MKL the CPU backend loads."""
    from ..backends.cpu.mkl_blas import _candidates
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        buf = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(buf, len(buf))
        text = buf.value.decode(errors="replace").strip()
        version = re.search(r"Version ([0-9][0-9.]*)", text)
        return (f"MKL {version.group(1)}" if version else text), lib.MKL_Get_Max_Threads()
    return "MKL", None


def _openblas_details():
    """(config text, threads) of numpy's OpenBLAS, or None when numpy's BLAS is another."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line.lower() and ".so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            config = getattr(lib, "openblas_get_config", None) or \
                getattr(lib, "scipy_openblas_get_config64_")
        except (OSError, AttributeError):
            continue
        config.restype = ctypes.c_char_p
        threads = getattr(lib, "openblas_get_num_threads", None) or \
            getattr(lib, "scipy_openblas_get_num_threads64_", None)
        return config().decode(errors="replace"), threads() if threads else None
    return None


def blas_row():
    import numpy  # noqa: F401 (numpy's BLAS must be loaded to be found)
    from ..backends.cpu.mkl_blas import load_mkl
    try:
        if load_mkl() is not None:
            version, threads = _mkl_details()
            return Row("BLAS", OK, f"{version}, {threads} threads (NEONLITE_BLAS=numpy switches "
                       f"to numpy's BLAS)")
        found = _openblas_details()
    except Exception as err:  # a BLAS that cannot be asked is a row, not a crash
        return Row("BLAS", WARN, f"cannot tell which BLAS: {one_line(err)}")
    text = f"numpy's: {found[0]}, {found[1]} threads" if found else "numpy's (not OpenBLAS)"
    chosen = os.environ.get("NEONLITE_BLAS", "").strip()
    if chosen:
        return Row("BLAS", WARN, f"{text} (NEONLITE_BLAS={chosen} turns MKL off)",
                   "unset NEONLITE_BLAS to use MKL where the mkl wheel is installed")
    return Row("BLAS", WARN, text, "pip install 'neonlite[mkl]' on x86-64: the cpu backend's "
               "GEMMs then run through MKL, which is faster for convolution and attention")


def compiler_rows(work_dir=None):
    """The C compiler, a test kernel compiled with the project's flags, OpenMP."""
    from ..kernels.toolchain import C_FLAGS, CompileError, CompilerNotFound, find_c_compiler
    try:
        compiler = find_c_compiler()
    except CompilerNotFound as err:
        fix = f"install gcc (e.g. apt-get install gcc) or set NEONLITE_CC; {NO_KERNELS}"
        return [Row("C compiler", FAIL, one_line(err), fix),
                Row("test kernel", ABSENT, "not compiled: no C compiler"),
                Row("OpenMP", ABSENT, "not tried: no C compiler")]
    rows = [Row("C compiler", OK, f"{compiler.version} ({compiler.command[0]})")]
    with tempfile.TemporaryDirectory(prefix="neonlite-doctor-", dir=work_dir) as tmp:
        source, library = Path(tmp, "doctor_test.c"), Path(tmp, "doctor_test.so")
        source.write_text(_TEST_KERNEL)
        try:
            compiler.compile_module("doctor_test", source, library)
            threads = ctypes.CDLL(str(library)).nl_doctor_omp_threads()
        except (CompileError, OSError) as err:
            log = getattr(err, "log", "") or str(err)
            first = next((line for line in log.splitlines() if "error" in line.lower()),
                         one_line(log)[:200])
            rows.append(Row("test kernel", FAIL, f"does not compile with {' '.join(C_FLAGS)}: "
                            f"{first.strip()}", "install a gcc or clang with OpenMP support "
                            f"(libgomp) or point NEONLITE_CC at one; {NO_KERNELS}"))
            rows.append(Row("OpenMP", FAIL, "not usable (the test kernel did not build)",
                            "see the test kernel row"))
            return rows
    rows.append(Row("test kernel", OK, f"compiles with {' '.join(C_FLAGS)}"))
    from ..backends.cpu.threads import usable_cores
    rows.append(Row("OpenMP", OK, f"{threads} threads ({usable_cores()} cores usable; "
                    f"OMP_NUM_THREADS sets it)"))
    return rows


def cpu_row(cpuinfo="/proc/cpuinfo"):
    """The CPU named as :func:`neonlite.cpu_peak.cpu_names` names it everywhere (model,
    microarchitecture, ``-march=native`` target) and its instruction sets (those
    ``NEONLITE_CPU_FEATURES_OFF`` turns off read as absent)."""
    from ..cpu_peak import cpu_names
    from ..kernels.cpu_features import cpu_flags, read_cpuinfo
    try:
        info = read_cpuinfo(Path(cpuinfo).read_text(errors="replace"))
    except OSError:
        info = {}
    names = cpu_names(info) if info else (platform.processor() or platform.machine())
    flags = cpu_flags(info)
    if not flags:
        return Row("CPU", WARN, f"{names}; instruction sets unknown (no /proc/cpuinfo flags)")
    have = ", ".join(f"{name} {'yes' if flag in flags else 'no'}"
                     for name, flag in INSTRUCTION_SETS)
    return Row("CPU", OK, f"{names}; {have} (the C kernels use what -march=native enables)")


def mpi_row():
    try:
        import mpi4py
        found = f"mpi4py {mpi4py.__version__}"
    except ImportError:
        found = None
    mpirun = shutil.which("mpirun")
    version = ""
    if mpirun:
        try:
            done = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                                  timeout=20)
            version = (done.stdout.strip().splitlines() or [""])[0]
        except (OSError, subprocess.TimeoutExpired) as err:
            version = f"does not answer --version ({one_line(err)})"
    if found and mpirun:
        cores = os.cpu_count() or 1
        return Row("MPI", OK, f"{found}; mpirun {mpirun}: {version}; more ranks than cores "
                              f"(here {cores} CPUs) need mpirun --oversubscribe -np N")
    missing = " and ".join(n for n, ok in (("mpi4py", found), ("mpirun", mpirun)) if not ok)
    return Row("MPI", ABSENT, f"{missing} not found (needed only for mpirun ... neonlite train)",
               "pip install 'neonlite[mpi]' (Open MPI's wheel and mpi4py)")
