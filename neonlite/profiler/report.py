"""The profile table: one row per layer (nested layers indented under their parent), then
the cost, zero_grads, optimizer, the finiteness check after each update, data,
communication and the rest of the step, and the measured step.  A nested layer whose parent does its work in fused ops (a transformer
block's GELU, fused with fc1's bias) has no times of its own and is marked so.

Times are means per profiled step.  A layer's FLOPs and bytes are those of the backend ops
inside its spans (:mod:`.flops`), so GFLOP/s = FLOPs / (fprop + bprop time).  ``% step`` of
the top-level rows adds up to 100 with the ``other`` row, which is the measured step time
minus every top-level span (the callbacks and the training loop itself).
"""
from collections import defaultdict

from .instrument import labelled_layers
from .memory import KINDS

STEP_ROWS = (("cost", "cost"), ("zero_grads", "zero grads"), ("optimizer", "optimizer"),
             ("finite_check", "finite check"), ("data", "data wait"), ("comm", "communication"),
             ("checkpoint", "checkpoint"))


def _top_level(span):
    return span.cat != "step" and (span.parent is None or span.parent.cat == "step")


def build_rows(recorder, model, memory_rows=None, peak=None, shared_bytes=None):
    """``{"layers": [...], "steps": [...], "step_ms": ..., "accounted_pct": ...}``: plain
    data, what ``--json`` prints."""
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
               "fprop_ms": 1e3 * entry["fprop"] / nsteps, "bprop_ms": 1e3 * entry["bprop"] / nsteps,
               "pct_step": 100.0 * busy / nsteps / step_s if step_s else 0.0,
               "gflop_per_step": entry["flops"] / nsteps / 1e9, "gflops": gflops,
               "pct_peak": 100.0 * gflops / peak if peak else None,
               "gbps": entry["bytes"] / busy / 1e9 if busy > 0 else 0.0, "fused": fused}
        mem = memory.get(id(layer))
        if mem is not None:
            row.update({f"{kind}_bytes": mem[kind] for kind in KINDS})
        layers.append(row)
    steps = []
    for cat, label in STEP_ROWS:
        if cat in top or cat in ("cost", "optimizer", "data"):
            steps.append({"name": label, "ms": 1e3 * top[cat] / nsteps,
                          "pct_step": 100.0 * top[cat] / nsteps / step_s if step_s else 0.0})
    accounted = sum(top.values()) / nsteps
    steps.append({"name": "other (callbacks, loop)", "ms": 1e3 * (step_s - accounted),
                  "pct_step": 100.0 * (step_s - accounted) / step_s if step_s else 0.0})
    return {"steps_profiled": len(recorder.steps), "step_ms": 1e3 * step_s,
            "accounted_pct": 100.0 * accounted / step_s if step_s else 0.0,
            "layers_ms": 1e3 * top["layers"] / nsteps, "layers": layers, "rest": steps,
            "peak_gflops": peak, "clock": recorder.clock.kind,
            "backend_workspace_bytes": shared_bytes}


def _mb(value):
    return f"{value / 2 ** 20:9.2f}" if value is not None else f"{'-':>9}"


def format_table(report, peak_note=""):
    """The rows of :func:`build_rows` as a text table."""
    width = max([len("  " * r["depth"] + r["name"]) for r in report["layers"]] + [24]) + 2
    head = (f"{'layer':<{width}}{'type':<20}{'fprop ms':>9}{'bprop ms':>9}{'% step':>8}"
            f"{'GFLOP/s':>9}{'% peak':>7}{'GB/s':>7}{'params MB':>10}{'act MB':>9}")
    lines = [head, "-" * len(head)]
    for r in report["layers"]:
        pct_peak = f"{r['pct_peak']:7.1f}" if r["pct_peak"] is not None else f"{'-':>7}"
        name = "  " * r["depth"] + r["name"]
        params = r.get("params_bytes")
        params = None if params is None else params + r["grads_bytes"] + r["optimizer_bytes"]
        if r["fused"]:
            note = "   (no call of its own: timed in its parent)"
            lines.append(f"{name:<{width}}{r['type'][:19]:<20}{note:<49}{_mb(params)}"
                         f"{_mb(r.get('activations_bytes'))}")
            continue
        lines.append(f"{name:<{width}}{r['type'][:19]:<20}{r['fprop_ms']:9.2f}"
                     f"{r['bprop_ms']:9.2f}{r['pct_step']:8.1f}{r['gflops']:9.2f}{pct_peak}"
                     f"{r['gbps']:7.2f}{_mb(params)}{_mb(r.get('activations_bytes'))}")
    lines.append("-" * len(head))
    lines.append(f"{'layers (fprop + bprop)':<{width + 20}}{report['layers_ms']:18.2f}"
                 f"{100.0 * report['layers_ms'] / report['step_ms']:8.1f}")
    for r in report["rest"]:
        lines.append(f"{r['name']:<{width + 20}}{r['ms']:18.2f}{r['pct_step']:8.1f}")
    lines.append("-" * len(head))
    lines.append(f"{'step (measured)':<{width + 20}}{report['step_ms']:18.2f}{100.0:8.1f}")
    lines.append(f"mean of {report['steps_profiled']} steps ({report['clock']} clock); the "
                 f"timed rows cover {report['accounted_pct']:.1f}% of the measured step; "
                 f"params MB = parameters + gradients + optimizer state")
    if report.get("backend_workspace_bytes") is not None:
        lines.append(f"backend workspaces shared by the layers: "
                     f"{report['backend_workspace_bytes'] / 2 ** 20:.2f} MB")
    if peak_note:
        lines.append(peak_note)
    return "\n".join(lines)
