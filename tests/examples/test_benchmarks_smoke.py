"""The benchmark suite runs end to end at tiny sizes (no timing assertions); an unknown
workload, or ``--against`` a comparison that is not installed, is an error."""
import json
import sys

import pytest

from benchmarks.run import main
from benchmarks.workloads import WORKLOADS


def test_benchmark_suite_smoke(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["workload"] for r in result["rows"]] == list(WORKLOADS)
    for row in result["rows"]:
        assert row["neonlite"] > 0 and row["neonlite_s"] > 0
    table = capsys.readouterr().out
    for name in WORKLOADS:
        assert name in table


def test_benchmark_rejects_unknown_workload(capsys):
    import pytest
    with pytest.raises(SystemExit):
        main(["--smoke", "--only", "nope"])
    assert "unknown workload" in capsys.readouterr().err


def test_table_keeps_long_workload_names_apart_from_their_figures():
    from benchmarks.run import format_table
    rows = [{"workload": "attention_T4096_causal", "figure": "ms", "neonlite": 134.2,
             "torch": 178.7, "ratio": 1.33},
            {"workload": "gemm", "figure": "GFLOP/s", "neonlite": 300.0}]
    header, rule, long_row, short_row = format_table(rows, "").splitlines()
    assert long_row.split()[:5] == ["attention_T4096_causal", "ms", "134.2", "178.7", "1.33"]
    assert short_row.split()[:3] == ["gemm", "GFLOP/s", "300.0"]
    # the columns line up under their headings
    assert long_row.index("ms") == short_row.index("GFLOP/s") == header.index("figure")


def test_onnx_predict_benchmark_smoke(capsys):
    """``python -m benchmarks.onnx_predict --smoke``: both rows, each model exported and run."""
    from support.requires import need
    need("onnx", "onnxruntime")
    from benchmarks.onnx_predict import main as onnx_main
    assert onnx_main(["--smoke"]) == 0
    table = capsys.readouterr().out
    assert "lenet_predict" in table and "char_transformer_predict" in table


def test_augment_kernels_benchmark_smoke(tmp_path, capsys, monkeypatch):
    """``python -m benchmarks.augment_kernels --smoke``: both rows timed (torchvision's side
    left out when no Python with it is named)."""
    from benchmarks.augment_kernels import ROWS
    from benchmarks.augment_kernels import main as augment_main
    monkeypatch.delenv("NEONLITE_TORCHVISION_PYTHON", raising=False)
    out = tmp_path / "augment.json"
    assert augment_main(["--smoke", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["workload"] for r in rows] == list(ROWS)
    assert all(r["neonlite"] > 0 and "torchvision" not in r for r in rows)
    assert "rrc224_flip_norm" in capsys.readouterr().out


def test_against_a_missing_comparison_is_an_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["--against", "torch", "--smoke", "--only", "gemm"]) == 1
    err = capsys.readouterr().err
    assert "PyTorch is not installed" in err


def test_jpeg_stages_benchmark_smoke(capsys):
    """``python -m benchmarks.jpeg_stages``: every stage timed, the resize on each vector path
    this CPU runs."""
    from support.requires import need
    need("compiler", "jpeg_kernel")
    from benchmarks.jpeg_stages import main as stages_main
    from neonlite.data.augment.kernels import augment_module
    from neonlite.kernels.cpu_features import byte_vector_level
    stages_main(["--count", "4", "--repeats", "1"])
    table = capsys.readouterr().out
    for stage in ("open (kernel)", "decode box (kernel)", "draw",
                  "resize + flip + normalise (box)", "[scalar]"):
        assert f"| {stage}" in table or f"{stage} |" in table, stage
    level = min(byte_vector_level(), augment_module().lib.aug_simd_built())
    assert ("[AVX-512]" in table) == (level >= 2) and ("[AVX2]" in table) == (level >= 1)


def test_image_loader_benchmark_smoke(capsys):
    """``python -m benchmarks.image_loader --smoke --only jpeg224``: neonlite's rows with their
    CPU time per image and cores busy; a PyTorch side that cannot run is a row saying why."""
    from benchmarks.image_loader import main as loader_main
    assert loader_main(["--smoke", "--only", "jpeg224", "--torch-python", sys.executable]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| (b)")]
    assert len(lines) == 4
    ours = [cell.strip() for cell in lines[0].split("|")[1:-1]]
    assert ours[1] == "neonlite ImageFolder" and ours[4] == "1.00x" and ours[6] == "1.00x"
    assert float(ours[2].replace(",", "")) > 0 and float(ours[5]) > 0 and float(ours[7]) > 0


def test_bf16_training_benchmark_smoke(tmp_path, capsys):
    """``python -m benchmarks.bf16_training --smoke``: every contender of a row in its own
    process, timed, with its peak memory; the header names the CPU's bf16 instruction sets."""
    from benchmarks.bf16_training import main as bf16_main
    out = tmp_path / "bf16.json"
    assert bf16_main(["--row", "lenet_bf16", "--smoke", "--rounds", "1", "--warmup", "1",
                      "--json", str(out)]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert {"neonlite_bf16", "neonlite_f32"} <= set(result["contenders"]), result["notes"]
    assert all(c["rate"] > 0 and c["peak_mib"] > 0 for c in result["contenders"].values())
    table = capsys.readouterr().out
    assert "AVX512-BF16" in table and "bf16 / neonlite_f32" in table


def test_bf16_training_benchmark_runs_only_the_contenders_asked(tmp_path, capsys):
    """``--contenders neonlite_bf16,neonlite_f32``: the two neonlite workers only, the others
    named as left out; an unknown name is one argparse error."""
    from benchmarks.bf16_training import main as bf16_main
    out = tmp_path / "bf16.json"
    assert bf16_main(["--row", "lenet_bf16", "--smoke", "--rounds", "1", "--warmup", "1",
                      "--contenders", "neonlite_bf16,neonlite_f32", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert set(result["contenders"]) == {"neonlite_bf16", "neonlite_f32"}
    assert "torch_autocast left out: not in --contenders" in result["notes"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        bf16_main(["--row", "lenet_bf16", "--contenders", "neonlite_bf16,tensorflow"])
    assert "tensorflow: expected names from" in capsys.readouterr().err


def test_bf16_optimizer_step_benchmark_smoke(capsys):
    """``python -m benchmarks.bf16_optimizer_step --smoke``: the three contenders' medians and
    their ratios to float32."""
    from benchmarks.bf16_optimizer_step import main as step_main
    assert step_main(["--smoke", "--rounds", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("f32", "bf16 stochastic", "bf16 nearest"))
    assert out.count("x f32") == 3


def test_bf16_loss_comparison_runs_both_roundings(capsys):
    """``--steps 2 --bf16-rounding both``: a bf16 run per rounding and the float32 run, each
    against the bound."""
    from support.harness import data_dir
    from support.requires import need
    need("shakespeare")
    from benchmarks.bf16_training import main as bf16_main
    assert bf16_main(["--row", "nanogpt_bf16", "--steps", "2", "--bf16-rounding", "both",
                      "--text", str(data_dir() / "text" / "tinyshakespeare.txt")]) == 0
    out = capsys.readouterr().out
    assert "bf16 nearest - f32" in out and "bf16 stochastic - f32" in out


def test_bf16_first_step_diagnosis_runs(capsys):
    """``python -m benchmarks.bf16_first_step --row nanogpt_bf16``: the five costs and the
    share of product weights one step leaves unmoved in bf16."""
    from support.harness import data_dir
    from support.requires import need
    need("shakespeare")
    from benchmarks.bf16_first_step import main as first_step_main
    assert first_step_main(["--row", "nanogpt_bf16", "--text",
                            str(data_dir() / "text" / "tinyshakespeare.txt")]) == 0
    out = capsys.readouterr().out
    assert out.count("masters rounded to bf16") == 3 and "did not move" in out


def test_bf16_conv_passes_benchmark_smoke(capsys):
    """``python -m benchmarks.bf16_conv_passes --smoke``: every pass of LeNet's convolutions,
    poolings and batch norm timed on bf16 and float32."""
    from support.requires import need
    need("compiler")
    from benchmarks.bf16_conv_passes import main as passes_main
    assert passes_main(["--smoke"]) == 0
    table = capsys.readouterr().out
    for name in ("conv1 fprop", "conv2 bprop", "pool1 bprop", "bn bprop", "load average"):
        assert name in table


def test_bf16_row_ops_benchmark_smoke(capsys):
    """``python -m benchmarks.bf16_row_ops --sizes nanogpt``: every row op timed on bf16 and
    float32, with their ratio."""
    from benchmarks.bf16_row_ops import main as rows_main
    assert rows_main(["--sizes", "nanogpt", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert {"layernorm_fprop", "scatter_add_rows", "softmax_cross_entropy"} <= set(rows)
    assert all(len(cells) == 3 and float(cells[2]) > 0 for cells in rows.values())
