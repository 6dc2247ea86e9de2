"""Render a trace (one file per rank or the merged one) as a PNG timeline: one row per rank,
the top-level layers' fprop and bprop as coloured bars (bprop hatched), the optimizer, data
waits and communication in their own colours.

    python -m neonlite.profiler.timeline t.json timeline.png [--steps 2]

Needs matplotlib (``pip install 'neonlite[plot]'``).
"""
import argparse
import json
import sys

OTHER_COLOURS = {"optimizer": "#7f7f7f", "comm": "#000000", "data": "#bcbd22",
                 "cost": "#17becf", "zero_grads": "#c7c7c7"}


def _slices(doc, steps):
    """(pid -> list of bars (start ms, length ms, label, kind)), the first ``steps`` steps
    of each rank, from the first step's start on rank 0."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    by_pid = {}
    for pid in sorted({e["pid"] for e in events}):
        mine = sorted((e for e in events if e["pid"] == pid), key=lambda e: e["ts"])
        marks = [e for e in mine if e.get("cat") == "step"][:steps]
        if not marks:
            continue
        end = marks[-1]["ts"] + marks[-1]["dur"]
        begin = marks[0]["ts"]
        data = [e for e in mine if e.get("cat") == "data" and e["ts"] < begin]
        begin = data[-1]["ts"] if data else begin
        bars = []
        for e in mine:
            if not begin <= e["ts"] <= end:
                continue
            cat = e.get("cat")
            top_layer = cat in ("fprop", "bprop") and e.get("args", {}).get("depth") == 0
            bucket = cat == "comm" and e["name"].startswith("allreduce bucket")
            if top_layer or cat in OTHER_COLOURS and not bucket:
                bars.append((e["ts"], e["dur"], e["name"], cat))
        by_pid[pid] = bars
    origin = min(b[0] for bars in by_pid.values() for b in bars)
    return {pid: [((ts - origin) / 1e3, dur / 1e3, name, cat) for ts, dur, name, cat in bars]
            for pid, bars in by_pid.items()}


def render(trace_path, png_path, steps=2):
    """Draw the first ``steps`` profiled steps of ``trace_path`` into ``png_path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(trace_path) as f:
        rows = _slices(json.load(f), steps)
    layers = []
    for bars in rows.values():
        for _, _, name, cat in bars:
            if cat in ("fprop", "bprop") and name not in layers:
                layers.append(name)
    palette = plt.get_cmap("tab20")
    colours = {name: palette(i % 20) for i, name in enumerate(layers)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.9 * len(rows)))
    for row, (pid, bars) in enumerate(sorted(rows.items())):
        for start, length, name, cat in bars:
            colour = colours.get(name) if cat in ("fprop", "bprop") else OTHER_COLOURS[cat]
            ax.barh(row, length, left=start, height=0.7, color=colour, edgecolor="black",
                    linewidth=0.3, hatch="//" if cat == "bprop" else None)
    ax.set_yticks(range(len(rows)), [f"rank {pid}" for pid in sorted(rows)])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[n]) for n in layers]
    handles += [plt.Rectangle((0, 0), 1, 1, color=c) for c in OTHER_COLOURS.values()]
    labels = layers + ["optimizer", "allreduce wait", "data wait", "cost", "zero grads"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.35 / len(rows)
                                                                   - 0.25),
              ncol=min(6, len(labels)), fontsize=8, frameon=False)
    ax.set_title(f"{trace_path}: first {steps} profiled steps (hatched: bprop)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neonlite.profiler.timeline",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a trace written by --profile")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument("--steps", type=int, default=2, help="steps to draw (default 2)")
    args = parser.parse_args(argv)
    render(args.trace, args.png, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
