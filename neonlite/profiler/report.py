"""The profile table: one row per layer (nested layers indented under their parent), then
the cost, zero_grads, optimizer, the finiteness check after each update, data,
communication, the ops the loop ran outside those, the rest of the step, and the measured
step.  A nested layer whose parent does its work in fused ops (a transformer block's GELU,
fused with fc1's bias) has no times of its own and is marked so.

Under each row, marked ``·``, the op-table ops it ran itself (:mod:`.op_rows`), slowest
first, and ``(between ops)``: the rest of its time outside its ops and nested layers, so a
row's ops, nested layers and ``(between ops)`` add up to it.

Times are means per profiled step.  A layer's FLOPs and bytes are those of the backend ops
inside its spans (:mod:`.flops`), so GFLOP/s = FLOPs / (fprop + bprop time).  ``% step`` of
the top-level rows adds up to 100 with the ``other`` row, which is the measured step time
minus every top-level span (the callbacks and the training loop itself).
"""
from collections import defaultdict

from .instrument import labelled_layers
from .memory import KINDS
from .op_rows import OpBreakdown, between_layer_ops

STEP_ROWS = (("cost", "cost"), ("zero_grads", "zero grads"), ("optimizer", "optimizer"),
             ("finite_check", "finite check"), ("data", "data wait"), ("comm", "communication"),
             ("checkpoint", "checkpoint"), ("op", "ops outside the rows above"))


def _top_level(span):
    return span.cat != "step" and (span.parent is None or span.parent.cat == "step")


def build_rows(recorder, model, memory_rows=None, peak=None, shared_bytes=None):
    """``{"layers": [...], "rest": [...], "step_ms": ..., "accounted_pct": ...}``: plain
    data, what ``--json`` prints.  Each layer row has ``ops`` (:mod:`.op_rows`) and
    ``between_ops`` (``{"fprop_ms", "bprop_ms"}``); each row of ``rest`` has ``ops`` and
    ``between_ops_ms``."""
    nsteps = max(1, len(recorder.steps))
    step_s = sum(b - a for a, b in recorder.steps) / nsteps
    per = defaultdict(lambda: {"fprop": 0.0, "bprop": 0.0, "flops": 0.0, "bytes": 0.0})
    top = defaultdict(float)
    for span in recorder.spans:
        if span.cat in ("fprop", "bprop"):
            entry = per[span.owner]
            entry[span.cat] += span.seconds
            entry["flops"] += span.flops
            entry["bytes"] += span.nbytes
        if _top_level(span):
            top["layers" if span.cat in ("fprop", "bprop") else span.cat] += span.seconds
    breakdown = OpBreakdown(recorder.spans)
    memory = {id(layer): mem for layer, _, mem in (memory_rows or [])}
    layers = []
    for layer, depth, label in labelled_layers(model.layers.layers):
        entry = per.get(id(layer))
        if entry is None and depth == 0:
            continue
        fused = entry is None       # its parent runs its work in fused ops (e.g. GELU)
        entry = entry or {"fprop": 0.0, "bprop": 0.0, "flops": 0.0, "bytes": 0.0}
        busy = entry["fprop"] + entry["bprop"]
        gflops = entry["flops"] / busy / 1e9 if busy > 0 else 0.0
        row = {"name": label, "type": type(layer).__name__, "depth": depth,
               "fprop_ms": 1e3 * entry["fprop"] / nsteps,
               "bprop_ms": 1e3 * entry["bprop"] / nsteps,
               "pct_step": 100.0 * busy / nsteps / step_s if step_s else 0.0,
               "gflop_per_step": entry["flops"] / nsteps / 1e9, "gflops": gflops,
               "pct_peak": 100.0 * gflops / peak if peak else None,
               "gbps": entry["bytes"] / busy / 1e9 if busy > 0 else 0.0, "fused": fused}
        row["ops"] = breakdown.layer_ops(id(layer), nsteps, step_s, peak)
        row["between_ops"] = between_layer_ops(row, row["ops"], breakdown.nested(id(layer)),
                                               nsteps)
        mem = memory.get(id(layer))
        if mem is not None:
            row.update({f"{kind}_bytes": mem[kind] for kind in KINDS})
        layers.append(row)
    steps = []
    for cat, label in STEP_ROWS:
        if cat in top or cat in ("cost", "optimizer", "data"):
            ops = breakdown.step_ops(cat, nsteps, step_s, peak)
            ms = 1e3 * top[cat] / nsteps
            steps.append({"name": label, "ms": ms,
                          "pct_step": 100.0 * top[cat] / nsteps / step_s if step_s else 0.0,
                          "ops": ops, "between_ops_ms": ms - sum(op["ms"] for op in ops)})
    accounted = sum(top.values()) / nsteps
    op_s = sum(span.seconds for span in recorder.spans if span.cat == "op")
    steps.append({"name": "other (callbacks, loop)", "ms": 1e3 * (step_s - accounted),
                  "pct_step": 100.0 * (step_s - accounted) / step_s if step_s else 0.0,
                  "ops": [], "between_ops_ms": 1e3 * (step_s - accounted)})
    return {"steps_profiled": len(recorder.steps), "step_ms": 1e3 * step_s,
            "accounted_pct": 100.0 * accounted / step_s if step_s else 0.0,
            "layers_ms": 1e3 * top["layers"] / nsteps, "layers": layers, "rest": steps,
            "peak_gflops": peak, "clock": recorder.clock.kind,
            "backend_workspace_bytes": shared_bytes, "ops_ms": 1e3 * op_s / nsteps,
            "ops_pct": 100.0 * op_s / nsteps / step_s if step_s else 0.0}


def _mb(value):
    return f"{value / 2 ** 20:9.2f}" if value is not None else f"{'-':>9}"


def _pct_peak(row):
    return f"{row['pct_peak']:7.1f}" if row["pct_peak"] is not None else f"{'-':>7}"


def _op_type(op):
    """The type column of an op row: ``op xN`` (N calls per step) and its kernel variants."""
    text = f"op x{op['calls']:g}" + (f" {'/'.join(op['variants'])}" if op["variants"] else "")
    return text[:19]


def _layer_op_lines(r, width):
    """A layer row's op rows and its ``(between ops)`` row, indented one level below it."""
    if not r["ops"] and r["between_ops"]["fprop_ms"] == r["fprop_ms"] \
            and r["between_ops"]["bprop_ms"] == r["bprop_ms"]:
        return []       # no op and no nested layer: the row is all its own
    indent = "  " * (r["depth"] + 1) + "· "
    lines = [f"{indent + op['name']:<{width}}{_op_type(op):<20}{op['fprop_ms']:9.2f}"
             f"{op['bprop_ms']:9.2f}{op['pct_step']:8.1f}{op['gflops']:9.2f}{_pct_peak(op)}"
             f"{op['gbps']:7.2f}" for op in r["ops"]]
    glue = r["between_ops"]
    lines.append(f"{indent + '(between ops)':<{width + 20}}{glue['fprop_ms']:9.2f}"
                 f"{glue['bprop_ms']:9.2f}")
    return lines


def _step_op_lines(r, width):
    """A step row's (cost, optimizer, ...) op rows and its ``(between ops)`` row."""
    if not r["ops"]:
        return []
    lines = [f"{'  · ' + op['name']:<{width}}{_op_type(op):<20}{op['ms']:18.2f}"
             f"{op['pct_step']:8.1f}{op['gflops']:9.2f}{_pct_peak(op)}{op['gbps']:7.2f}"
             for op in r["ops"]]
    lines.append(f"{'  · (between ops)':<{width + 20}}{r['between_ops_ms']:18.2f}")
    return lines


def format_table(report, peak_note=""):
    """The rows of :func:`build_rows` as a text table, each row's ops under it."""
    names = [len("  " * (r["depth"] + 1) + "· " + op["name"]) for r in report["layers"]
             for op in r["ops"]]
    names += [len("  · " + op["name"]) for r in report["rest"] for op in r["ops"]]
    width = max(names + [len("  " * r["depth"] + r["name"]) for r in report["layers"]]
                + [24]) + 2
    head = (f"{'layer / op':<{width}}{'type':<20}{'fprop ms':>9}{'bprop ms':>9}{'% step':>8}"
            f"{'GFLOP/s':>9}{'% peak':>7}{'GB/s':>7}{'params MB':>10}{'act MB':>9}")
    lines = [head, "-" * len(head)]
    for r in report["layers"]:
        name = "  " * r["depth"] + r["name"]
        params = r.get("params_bytes")
        params = None if params is None else params + r["grads_bytes"] + r["optimizer_bytes"]
        if r["fused"]:
            note = "   (no call of its own: timed in its parent)"
            lines.append(f"{name:<{width}}{r['type'][:19]:<20}{note:<49}{_mb(params)}"
                         f"{_mb(r.get('activations_bytes'))}")
            continue
        lines.append(f"{name:<{width}}{r['type'][:19]:<20}{r['fprop_ms']:9.2f}"
                     f"{r['bprop_ms']:9.2f}{r['pct_step']:8.1f}{r['gflops']:9.2f}{_pct_peak(r)}"
                     f"{r['gbps']:7.2f}{_mb(params)}{_mb(r.get('activations_bytes'))}")
        lines += _layer_op_lines(r, width)
    lines.append("-" * len(head))
    lines.append(f"{'layers (fprop + bprop)':<{width + 20}}{report['layers_ms']:18.2f}"
                 f"{100.0 * report['layers_ms'] / report['step_ms']:8.1f}")
    for r in report["rest"]:
        lines.append(f"{r['name']:<{width + 20}}{r['ms']:18.2f}{r['pct_step']:8.1f}")
        lines += _step_op_lines(r, width)
    lines.append("-" * len(head))
    lines.append(f"{'step (measured)':<{width + 20}}{report['step_ms']:18.2f}{100.0:8.1f}")
    lines.append(f"mean of {report['steps_profiled']} steps ({report['clock']} clock); the "
                 f"timed rows cover {report['accounted_pct']:.1f}% of the measured step; "
                 f"params MB = parameters + gradients + optimizer state")
    lines.append(f"· rows: the op-table ops a row ran itself, slowest first (op xN: N calls "
                 f"per step, kernel variant); a row = its ops + its nested layers + "
                 f"(between ops); all ops: {report['ops_ms']:.2f} ms, "
                 f"{report['ops_pct']:.1f}% of the step")
    if report.get("backend_workspace_bytes") is not None:
        lines.append(f"backend workspaces shared by the layers: "
                     f"{report['backend_workspace_bytes'] / 2 ** 20:.2f} MB")
    if peak_note:
        lines.append(peak_note)
    return "\n".join(lines)
