"""This CPU's theoretical fp32 peak, for GEMM efficiency figures."""
import os
import re


def cpu_peak_gflops():
    """cores x GHz x fp32 FLOP/cycle (2 FMA units x vector width x 2), from /proc/cpuinfo.
    Returns (gflops, description) or (None, reason)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError as err:
        return None, f"no /proc/cpuinfo ({err})"
    flags = set(re.search(r"^flags\s*:\s*(.*)$", info, re.M).group(1).split())
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M).group(1).strip()
    ghz = re.search(r"@\s*([\d.]+)GHz", model)
    ghz = float(ghz.group(1)) if ghz else float(
        re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M).group(1)) / 1000.0
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags or "avx" in flags else 4
    fma = 2 if "fma" in flags or "avx512f" in flags else 1
    cores = len(os.sched_getaffinity(0))
    gflops = cores * ghz * lanes * 2 * fma
    return gflops, f"{cores} cores x {ghz:.2f} GHz x {lanes * 2 * fma} FLOP/cycle ({model})"
