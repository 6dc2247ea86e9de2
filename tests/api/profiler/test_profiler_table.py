"""The profile table's op rows (``neonlite/profiler/op_rows.py``, ``report.py``) on a
hand-made record: every op under the row whose time holds it, the innermost layer first, and
every row adding up exactly (its ops + its nested layers + ``(between ops)``)."""
from types import SimpleNamespace

import pytest

from neonlite.profiler.clock import HostClock
from neonlite.profiler.recorder import Recorder, Span
from neonlite.profiler.report import build_rows, format_table


class FakeLayer:
    """A layer as the profiler sees one: a name, ``fprop``, and nested ``layers``."""

    def __init__(self, name, layers=()):
        self.name, self.layers = name, list(layers)

    def fprop(self):
        """Never called: the record below is made by hand."""


def _record():
    """One 10 s step: data 0-0.5; outer's fprop 0.5-4.5 with a GEMM (1 s, 2 GFLOP) and its
    nested layer 2-4 (a softmax, 1 s); the optimizer 5-7 with an op-tree (1 s); an op the
    loop ran outside every span 7.5-8."""
    inner = FakeLayer("inner")
    outer = FakeLayer("outer", [inner])
    rec = Recorder(HostClock())
    step = Span("step 0", "step", 0, 0.0, 10.0)
    fprop = Span("outer", "fprop", 1, 0.5, 4.5, {"depth": 0}, step, id(outer))
    nested = Span("inner", "fprop", 2, 2.0, 4.0, {"depth": 1}, fprop, id(inner))
    optimizer = Span("optimizer", "optimizer", 1, 5.0, 7.0, None, step)
    ops = [Span("compound_dot", "op", 2, 0.6, 1.6, {"variant": "MKLGemm"}, fprop),
           Span("softmax", "op", 3, 2.5, 3.5, None, nested),
           Span("execute_multi", "op", 2, 5.5, 6.5, None, optimizer),
           Span("uniform", "op", 1, 7.5, 8.0, None, step)]
    ops[0].flops, ops[0].nbytes = 2e9, 1e9
    rec.spans = [step, Span("data", "data", 1, 0.0, 0.5, None, step), fprop, ops[0], nested,
                 ops[1], optimizer, ops[2], ops[3]]
    rec.steps = [(0.0, 10.0)]
    model = SimpleNamespace(layers=SimpleNamespace(layers=[outer]))
    return rec, model


def test_ops_sit_under_the_row_whose_time_holds_them():
    rec, model = _record()
    report = build_rows(rec, model, peak=100.0)
    outer, inner = report["layers"]
    assert [op["name"] for op in outer["ops"]] == ["compound_dot"]
    dot = outer["ops"][0]
    assert dot["calls"] == 1 and dot["fprop_ms"] == pytest.approx(1000.0)
    assert dot["gflops"] == pytest.approx(2.0) and dot["gbps"] == pytest.approx(1.0)
    assert dot["pct_peak"] == pytest.approx(2.0) and dot["variants"] == ["MKLGemm"]
    assert dot["pct_step"] == pytest.approx(10.0)
    # outer's 4 s: its GEMM (1 s) + the nested layer (2 s) + 1 s between them
    assert outer["between_ops"]["fprop_ms"] == pytest.approx(1000.0)
    assert [op["name"] for op in inner["ops"]] == ["softmax"]
    assert inner["between_ops"]["fprop_ms"] == pytest.approx(1000.0)
    rest = {r["name"]: r for r in report["rest"]}
    assert [op["name"] for op in rest["optimizer"]["ops"]] == ["execute_multi"]
    assert rest["optimizer"]["between_ops_ms"] == pytest.approx(1000.0)
    loop = rest["ops outside the rows above"]
    assert loop["ms"] == pytest.approx(500.0) and [op["name"] for op in loop["ops"]] == \
        ["uniform"]
    assert report["layers_ms"] + sum(r["ms"] for r in report["rest"]) == \
        pytest.approx(report["step_ms"])
    assert report["ops_ms"] == pytest.approx(3500.0)


def test_text_table_prints_each_row_s_ops_below_it():
    rec, model = _record()
    lines = format_table(build_rows(rec, model, peak=100.0)).splitlines()
    at = {line.split()[0] if not line.lstrip().startswith("·") else line.split()[1]: i
          for i, line in enumerate(lines) if line.strip()}
    assert at["outer"] < at["compound_dot"] < at["inner"] < at["softmax"]
    assert lines[at["compound_dot"]].startswith("  · compound_dot")
    assert "op x1 MKLGemm" in lines[at["compound_dot"]]
    assert lines[at["softmax"]].startswith("    · softmax")
    assert at["optimizer"] < at["execute_multi"] < at["ops"] < at["uniform"]
    assert sum(line.lstrip().startswith("· (between ops)") for line in lines) == 4
