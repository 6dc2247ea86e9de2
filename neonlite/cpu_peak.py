"""This CPU's fp32 peak, which the benchmark's GEMM row and the profiler's "% of peak" divide by.

The peak is measured at run time with a short FMA-throughput kernel (:data:`FMA_SOURCE`: 16
independent vector FMA chains per thread, each in a register, one thread per usable core; the
sum of each thread's best rate over 40 bursts of about 2 ms, each timed by its thread), so it holds at the clock the cores actually run at, with
their AVX-512 down-clocking and turbo, while the time slices other processes take on a shared
machine do not count against it.  Beside it, the FP32 FLOP per cycle per core of
the microarchitecture (:func:`fp32_flop_per_cycle`: 2 x vector lanes x FMA units, where AMD
Zen 4 executes AVX-512 on 256-bit units, 32, and Intel server cores with two FMA-512 units do
64) gives the clock that measurement implies.  Without a C compiler the peak is that table
times the cores' current clock from ``/proc/cpuinfo`` (not the base clock in the model name),
and the description says "estimated".
"""
import ctypes
import functools
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from .kernels.first_use import cpu_name
from .kernels.toolchain import CompilerNotFound, find_c_compiler

from .kernels.cpu_features import read_cpuinfo

FMA_SOURCE = r"""
#include <omp.h>
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
#define CHAINS 16
typedef float vec __attribute__((vector_size(LANES * 4)));

int fma_lanes(void) { return LANES; }

#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) \
                X(14) X(15)
#define DECLARE(k) vec a##k = scale * (float)(k + 1 + omp_get_thread_num());
#define STEP(k) a##k = a##k * scale + shift;
#define ADD(k) sum += a##k;

/* FLOP per second of `threads` threads, each running `iters` rounds of CHAINS independent
   vector FMAs (each chain in its own register, so the FMA units, not latency, set the pace):
   the sum of each thread's own rate, timed by the thread, so threads that start late (woken
   on a busy machine) do not count as slow cores.  `best` (one slot per thread) keeps each
   thread's best rate over calls. */
double fma_run(long iters, int threads, double *best) {
    #pragma omp parallel num_threads(threads)
    {
        vec scale, shift, sum;
        for (int i = 0; i < LANES; i++) { scale[i] = 0.9999999f; shift[i] = 1e-7f; sum[i] = 0; }
        EACH(DECLARE)
        double start = omp_get_wtime();
        for (long n = 0; n < iters; n++) {
            EACH(STEP)
            __asm__ volatile("" ::: "memory");
        }
        double seconds = omp_get_wtime() - start;
        EACH(ADD)
        float check = 0.0f;
        for (int i = 0; i < LANES; i++) check += sum[i];
        double rate = (check == check ? 2.0 : 0.0) * (double)iters * CHAINS * LANES / seconds;
        int me = omp_get_thread_num();
        if (rate > best[me]) best[me] = rate;
    }
    double total = 0.0;
    for (int t = 0; t < threads; t++) total += best[t];
    return total;
}
"""

# Intel family 6 models whose cores have two 512-bit FMA units (server and workstation:
# Skylake-SP/W, Cascade/Cooper Lake, Ice Lake-SP/D, Sapphire/Emerald/Granite Rapids,
# Knights Landing/Mill); Silver, Bronze and most Gold 5xxx parts of model 85 have one.
_INTEL_TWO_FMA512 = {85: "Skylake/Cascade Lake/Cooper Lake server", 106: "Ice Lake server",
                     108: "Ice Lake-D", 143: "Sapphire Rapids", 207: "Emerald Rapids",
                     173: "Granite Rapids", 174: "Granite Rapids-D", 87: "Knights Landing",
                     133: "Knights Mill"}
_INTEL_ONE_FMA512 = re.compile(r"Silver|Bronze|Gold 5\d{3}(?!.*5122)")


def fp32_flop_per_cycle(info):
    """``(FP32 FLOP per cycle per core, microarchitecture words)`` from cpuinfo fields
    (``vendor_id``, ``cpu family``, ``model``, ``model name``, ``flags``)."""
    flags = set(info.get("flags", "").split())
    vendor, name = info.get("vendor_id", ""), info.get("model name", "")
    family, model = int(info.get("cpu family", 0) or 0), int(info.get("model", 0) or 0)
    avx512, fma = "avx512f" in flags, "fma" in flags
    if vendor == "AuthenticAMD":
        if family == 26 and avx512:
            return 64, "AMD Zen 5: two 512-bit FMA units"
        if family == 25:
            return 32, ("AMD Zen 4: AVX-512 on two 256-bit FMA units" if avx512
                        else "AMD Zen 3: two 256-bit FMA units")
        if family == 23:
            return (32, "AMD Zen 2: two 256-bit FMA units") if model >= 0x30 else \
                (16, "AMD Zen/Zen+: two 128-bit FMA units")
    if vendor == "GenuineIntel" and family == 6 and avx512:
        if model in _INTEL_TWO_FMA512 and not _INTEL_ONE_FMA512.search(name):
            return 64, f"Intel {_INTEL_TWO_FMA512[model]}: two 512-bit FMA units"
        return 32, "Intel AVX-512 core with one 512-bit FMA unit"
    if avx512:
        return 32, "AVX-512 core, one 512-bit FMA unit assumed"
    if fma:
        return 32, "AVX2 core with two 256-bit FMA units"
    if "avx" in flags:
        return 16, "AVX core without FMA"
    return 8, "SSE core"


def cpu_names(info=None):
    """This CPU named one way wherever neonlite names it (``neonlite doctor``'s CPU row, the
    profiler's and the benchmark's peak line): the model name, the microarchitecture as
    :func:`fp32_flop_per_cycle` knows it, and what the C compiler's ``-march=native`` builds
    the kernels for (its own, sometimes older, name), e.g. ``AMD EPYC 9B14 (AMD Zen 4;
    -march=native: znver3)``."""
    info = read_cpuinfo() if info is None else info
    arch = fp32_flop_per_cycle(info)[1].split(":")[0]
    try:
        target = cpu_name()
    except CompilerNotFound:
        target = "no C compiler"
    return f"{info.get('model name', 'unknown CPU')} ({arch}; -march=native: {target})"


@functools.lru_cache(maxsize=None)
def _fma_library():
    compiler = find_c_compiler()
    with tempfile.TemporaryDirectory(prefix="neonlite-fma-") as folder:
        source, library = Path(folder) / "fma.c", Path(folder) / "fma.so"
        source.write_text(FMA_SOURCE)
        subprocess.run([*compiler.command, "-O2", "-march=native", "-fopenmp", "-fPIC",
                        "-shared", str(source), "-o", str(library)], check=True,
                       capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        lib = ctypes.CDLL(str(library))
    lib.fma_run.restype = ctypes.c_double
    lib.fma_run.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    return lib


def measure_fma_gflops(threads, burst=0.002, repeats=40):
    """fp32 GFLOP/s of the FMA kernel on ``threads`` threads (:func:`measure_gflops`)."""
    return measure_gflops(_fma_library().fma_run, threads, burst, repeats)


def measure_gflops(run, threads, burst=0.002, repeats=40,
                   new_best=lambda n: (ctypes.c_double * n)()):
    """GFLOP/s of a throughput kernel ``run(iters, threads, best) -> FLOP/s`` (the FMA kernel
    here, the bf16 GEMM module's ``nl_bf16_peak_run``) on ``threads`` threads: the sum over
    threads of each one's best rate in ``repeats`` bursts of about ``burst`` seconds, so time
    slices lost to other processes on a shared machine do not count as slowness of the
    cores.  ``new_best(n)``: a zeroed array of n doubles ``run`` takes."""
    iters = 1000
    while True:
        best = new_best(threads)
        start = time.perf_counter()
        run(iters, 1, best)
        took = time.perf_counter() - start
        if took > burst / 4 or iters > 1 << 40:
            break
        iters *= 2
    iters = max(1, int(iters * burst / max(took, 1e-9)))
    best = new_best(threads)
    total = 0.0
    for _ in range(repeats):
        total = run(iters, threads, best)
    return total / 1e9


@functools.lru_cache(maxsize=None)
def cpu_peak_gflops():
    """``(gflops, description)``: measured with the FMA kernel where a C compiler runs, else
    estimated from the table and the current clock; ``(None, reason)`` when neither works."""
    info = read_cpuinfo()
    cores = len(os.sched_getaffinity(0))
    per_cycle, arch = fp32_flop_per_cycle(info)
    names = cpu_names(info)
    try:
        measured = measure_fma_gflops(cores)
    except Exception as err:  # no compiler, no OpenMP: fall back to the table
        if not info.get("mhz"):
            return None, f"no FMA measurement ({err}) and no clock in /proc/cpuinfo"
        gflops = cores * info["mhz"] / 1000.0 * per_cycle
        return gflops, (f"estimated: {cores} cores x {info['mhz'] / 1000.0:.2f} GHz (current "
                        f"clock) x {per_cycle} FP32 FLOP/cycle ({arch.split(': ', 1)[-1]}) "
                        f"of {names}; the FMA kernel did not run: {err}")
    ghz = measured / cores / per_cycle
    return measured, (f"measured with an FMA-throughput kernel on {cores} cores of {names} "
                      f"({arch.split(': ', 1)[-1]}: {per_cycle} FP32 FLOP/cycle/core, so about "
                      f"{ghz:.2f} GHz)")
