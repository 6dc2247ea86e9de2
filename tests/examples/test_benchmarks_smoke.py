"""The benchmark suite runs end to end at tiny sizes (no timing assertions)."""
import json

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
