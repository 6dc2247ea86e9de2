"""The runtime CPU facts (``kernels/cpu_features.py``): flags from /proc/cpuinfo, the
forced-off switch tests use to simulate a CPU without AVX512-BF16, AMX only with its flags."""
from neonlite.kernels import cpu_features

SAPPHIRE = ("processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx512f avx512_bf16 "
            "amx_tile amx_bf16\ncpu MHz\t\t: 2000.0\n\nprocessor\t: 1\ncpu MHz\t\t: 3000.0\n")
ZEN3 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n"


def test_flags_of_a_cpuinfo_text():
    info = cpu_features.read_cpuinfo(SAPPHIRE)
    assert info["model name"] == "Intel Xeon" and info["mhz"] == 2500.0
    assert cpu_features.has_avx512_bf16(info)
    assert cpu_features.amx_bf16_state(info)[0]
    zen3 = cpu_features.read_cpuinfo(ZEN3)
    assert not cpu_features.has_avx512_bf16(zen3)
    usable, reason = cpu_features.amx_bf16_state(zen3)
    assert not usable and "amx_tile" in reason


def test_forced_off_hides_the_flags(monkeypatch):
    info = cpu_features.read_cpuinfo(SAPPHIRE)
    monkeypatch.setenv(cpu_features.FEATURES_OFF, "avx512_bf16, amx_bf16")
    assert cpu_features.forced_off() == {"avx512_bf16", "amx_bf16"}
    assert not cpu_features.has_avx512_bf16(info)
    assert not cpu_features.has_amx_bf16(info)
    assert not cpu_features.has_avx512_bf16()
    assert "avx512_bf16" not in cpu_features.cpu_flags()


def test_this_machine_answers_without_error():
    assert isinstance(cpu_features.has_avx512_bf16(), bool)
    usable, reason = cpu_features.amx_bf16_state()
    assert isinstance(usable, bool) and reason


def test_doctor_cpu_row_follows_the_switch(monkeypatch):
    from neonlite.doctor.cpu_rows import cpu_row
    monkeypatch.setenv(cpu_features.FEATURES_OFF, "avx512_bf16")
    assert "AVX512-BF16 no" in cpu_row().found
