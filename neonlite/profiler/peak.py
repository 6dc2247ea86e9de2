"""The machine's peak floating-point rate, for the profile's "% of peak" column.

On the CPU it is the benchmark suite's figure: ``cpu_peak_gflops()`` of
``benchmarks/cpu_info.py`` (cores x clock x FLOP/cycle of the microarchitecture), loaded from
the source tree beside the package (an editable install or a checkout); an installed wheel
has no ``benchmarks`` folder and shows no peak.  No GPU peak is known to neonlite, so GPU
rows show achieved GFLOP/s only.
"""
import importlib.util
from pathlib import Path


def _cpu_info():
    try:
        from benchmarks import cpu_info
        return cpu_info
    except ImportError:
        pass
    source = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_info.py"
    if not source.is_file():
        return None
    spec = importlib.util.spec_from_file_location("neonlite_benchmarks_cpu_info", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine_peak(backend_name):
    """(GFLOP/s or None, a line saying where the figure comes from)."""
    if backend_name != "cpu":
        return None, f"no peak figure for the {backend_name} backend: GFLOP/s only"
    cpu_info = _cpu_info()
    if cpu_info is None:
        return None, "no CPU peak: benchmarks/cpu_info.py is not beside this install"
    peak, note = cpu_info.cpu_peak_gflops()
    return (peak, f"% peak: of the CPU's fp32 peak {peak:.0f} GFLOP/s = {note}") if peak \
        else (None, f"no CPU peak: {note}")
