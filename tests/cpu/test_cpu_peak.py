"""The CPU peak that the benchmark's "% of CPU peak" divides by: FP32 FLOP per cycle from the
microarchitecture, and the peak measured at run time with an FMA kernel."""
import pytest


def test_cpu_peak_per_microarchitecture():
    from neonlite.cpu_peak import fp32_flop_per_cycle
    zen4 = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17",
            "model name": "AMD EPYC 9654 96-Core Processor",
            "flags": "fma avx avx2 avx512f avx512bw"}
    zen3 = dict(zen4, model="1", flags="fma avx avx2", **{"model name": "AMD EPYC 7763"})
    spr = {"vendor_id": "GenuineIntel", "cpu family": "6", "model": "143",
           "model name": "Intel(R) Xeon(R) Platinum 8480+", "flags": "fma avx avx2 avx512f"}
    silver = dict(spr, model="85", **{"model name": "Intel(R) Xeon(R) Silver 4114 CPU"})
    icl = dict(spr, model="126", **{"model name": "Intel(R) Core(TM) i7-1065G7 CPU"})
    hsw = dict(spr, model="63", flags="fma avx avx2",
               **{"model name": "Intel(R) Xeon(R) CPU E5-2680 v3"})
    assert fp32_flop_per_cycle(zen4)[0] == 32
    assert fp32_flop_per_cycle(zen3)[0] == 32
    assert fp32_flop_per_cycle(spr)[0] == 64
    assert fp32_flop_per_cycle(silver)[0] == 32
    assert fp32_flop_per_cycle(icl)[0] == 32
    assert fp32_flop_per_cycle(hsw)[0] == 32


def test_cpu_peak_is_measured_at_run_time():
    from neonlite.cpu_peak import cpu_peak_gflops
    from neonlite.kernels.toolchain import CompilerNotFound, find_c_compiler
    try:
        find_c_compiler()
    except CompilerNotFound as err:
        pytest.skip(f"no C compiler to build the FMA kernel: {err}")
    peak, text = cpu_peak_gflops()
    assert peak > 0 and text.startswith("measured"), text
    assert "FLOP/cycle" in text
