"""The machine's peak floating-point rate, for the profile's "% of peak" column.

On the CPU it is :func:`neonlite.cpu_peak.cpu_peak_gflops` (measured with an FMA-throughput
kernel, or cores x clock x FLOP/cycle of the microarchitecture where no compiler runs).  No GPU
peak is known to neonlite, so GPU rows show achieved GFLOP/s only.
"""
from ..cpu_peak import cpu_peak_gflops


def machine_peak(backend_name):
    """(GFLOP/s or None, a line saying where the figure comes from)."""
    if backend_name != "cpu":
        return None, f"no peak figure for the {backend_name} backend: GFLOP/s only"
    peak, note = cpu_peak_gflops()
    return (peak, f"% peak: of the CPU's fp32 peak {peak:.0f} GFLOP/s = {note}") if peak \
        else (None, f"no CPU peak: {note}")
