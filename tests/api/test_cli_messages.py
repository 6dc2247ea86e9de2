"""Smaller points a newcomer meets: help texts that say what the flags do, the ``kernels
list`` table, "1 epoch", ``--against`` for a missing comparison, and the CPU peak that the
benchmark's "% of CPU peak" divides by."""
import io
import sys
from pathlib import Path

import pytest

import neonlite
from neonlite.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def help_of(argv, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_texts(capsys):
    top = help_of([], capsys)
    assert "check" not in top.split("kernels", 1)[1].split("generate")[0]
    for command in ("describe", "plot"):
        assert "progress bar" not in help_of([command], capsys)
    generate = help_of(["generate"], capsys)
    assert "greedy" in generate and "-b {" in generate and "(default cpu)" in generate
    kernels = help_of(["kernels", "list"], capsys)
    assert "(default: sm_80,sm_90)" in kernels and "('sm_80'" not in kernels


def test_kernels_list_has_a_header_and_aligned_columns(capsys):
    from neonlite.kernels import specs
    from neonlite.kernels.build import Builder
    from neonlite.cli.kernels import _list
    out = io.StringIO()
    _list(Builder(), None, specs.DEFAULT_CUDA_ARCHS, out)
    lines = out.getvalue().splitlines()
    header = lines[1]
    assert header.split() == ["variant", "target", "source", "defines", "state"]
    starts = [header.index(word) for word in ("target", "source", "defines", "state")]
    rows = [line for line in lines[2:] if line and not line.startswith(" ")]
    assert rows
    for row in rows:
        for start in starts:
            assert row[start - 1] == " " and row[start] != " ", (row, start)


def test_done_line_says_one_epoch(capsys):
    previous = neonlite.backends._current
    assert main(["train", str(EXAMPLES / "shapes_cnn.yaml"), "-e", "1", "--max-batches", "1",
                 "--eval-freq", "0"]) == 0
    neonlite.backends._current = previous
    done = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.startswith("done: 1 epoch in "), done


def test_against_a_missing_comparison_is_an_error(monkeypatch, capsys):
    from benchmarks.run import main as bench
    monkeypatch.setitem(sys.modules, "torch", None)
    assert bench(["--against", "torch", "--smoke", "--only", "gemm"]) == 1
    err = capsys.readouterr().err
    assert "PyTorch is not installed" in err


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
