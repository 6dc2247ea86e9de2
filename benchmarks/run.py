"""Run the benchmark suite: ``python -m benchmarks.run [--backend cpu|gpu]
[--against auto|torch|none] [--json OUT] [--smoke] [--only NAME,...] [--repeats N]``.

Each workload runs in neonlite and (``--against torch``; by default, ``auto``, when PyTorch is
installed) in PyTorch in the same process; asking ``--against torch`` where PyTorch cannot run
is an error (exit status 1), alternating call by call after warm-up; the table shows medians
and the speed ratio neonlite/PyTorch (> 1: neonlite is faster).  ``--smoke`` uses tiny sizes and
asserts nothing about speed (CI runs it).
"""
import argparse
import json
import sys
import traceback

import numpy as np

from neonlite.atomic import atomic_write
from neonlite.cpu_peak import cpu_peak_gflops
from .timing import time_alternating
from .workloads import GPU_WORKLOADS, WORKLOADS


def _make_backend_factory(backend):
    from neonlite import gen_backend

    def make(batch_size):
        return gen_backend(backend, batch_size=batch_size, rng_seed=0, datatype=np.float32)
    return make


def _torch_device(backend):
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed (pip install torch); neonlite timed alone"
    if backend == "gpu":
        if not torch.cuda.is_available():
            return None, "PyTorch has no CUDA device here"
        return "cuda", None
    return "cpu", None


def _sync_for(backend, device):
    def sync(name):
        if name == "neonlite" and backend == "gpu":
            from neonlite import get_backend
            get_backend().synchronize()
        elif name == "torch" and device == "cuda":
            import torch
            torch.cuda.synchronize()
    return sync


def run_workload(module, backend, device, smoke, repeats):
    """Time one workload; returns a result row (dict).  A workload whose ``unavailable(smoke)``
    gives a reason (a model package not installed) is a row with that note and no figures."""
    row = {"workload": module.NAME, "figure": module.FIGURE}
    reason = getattr(module, "unavailable", lambda smoke: None)(smoke)
    if reason:
        row["note"] = reason
        return row
    step, work = module.neonlite(_make_backend_factory(backend), smoke)
    contenders = {"neonlite": step}
    if hasattr(module, "extra_contenders"):
        contenders.update(module.extra_contenders(_make_backend_factory(backend), smoke))
    if device is not None:
        torch_step, _ = module.torch(device, smoke)
        contenders["torch"] = torch_step
        if hasattr(module, "torch_contenders"):
            contenders.update(module.torch_contenders(device, smoke))
    medians = time_alternating(contenders, repeats, warmup=1 if smoke else 3,
                               sync=_sync_for(backend, device))
    for name, seconds in medians.items():
        row[f"{name}_s"] = seconds
        row[name] = seconds * 1e3 if work is None else work / seconds
    if "torch" in medians:
        row["ratio"] = medians["torch"] / medians["neonlite"]
    if "neonlite_dense" in medians:
        row["dense_ratio"] = medians["neonlite_dense"] / medians["neonlite"]
    if hasattr(module, "note"):
        row["note"] = module.note(row)
    if module.NAME == "gemm" and backend == "cpu":
        peak, _ = cpu_peak_gflops()
        if peak:
            row["neonlite_pct_peak"] = 100.0 * row["neonlite"] / peak
    return row


def format_table(rows, note):
    """The result rows as a text table; the workload column is as wide as the longest name (a
    name never runs into the figure column)."""
    width = max([len("workload")] + [len(r["workload"]) for r in rows]) + 2
    lines = [f"{'workload':<{width}}{'figure':<10}{'neonlite':>12}{'torch':>12}{'ratio':>8}  note",
             "-" * (width + 56)]
    for r in rows:
        name = f"{r['workload']:<{width}}{r['figure']:<10}"
        if "neonlite" not in r:
            lines.append(f"{name}{'-':>12}{'-':>12}{'-':>8}  {r['note']}")
            continue
        torch = f"{r['torch']:>12.1f}" if "torch" in r else f"{'-':>12}"
        ratio = f"{r['ratio']:>8.2f}" if "ratio" in r else f"{'-':>8}"
        extra = f"{r['neonlite_pct_peak']:.0f}% of CPU peak" if "neonlite_pct_peak" in r else ""
        if "dense_ratio" in r:
            extra = (f"neonlite dense {r['neonlite_dense']:.1f} {r['figure']}, dense/sparse "
                     f"{r['dense_ratio']:.2f}x")
        extra = "; ".join(x for x in (extra, r.get("note", "")) if x)
        lines.append(f"{name}{r['neonlite']:>12.1f}{torch}{ratio}  {extra}")
    if note:
        lines.append(note)
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--against", choices=["auto", "torch", "none"], default="auto",
                        help="compare with PyTorch: torch (an error if it cannot run), none, "
                             "or auto (default: torch when it is installed)")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON here")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, few repeats")
    parser.add_argument("--only", help="comma-separated workload names: " + ", ".join(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    workloads = {**WORKLOADS, **GPU_WORKLOADS} if args.backend == "gpu" else WORKLOADS
    names = args.only.split(",") if args.only else list(workloads)
    unknown = [n for n in names if n not in workloads]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(workloads)}")
    device, note = (None, "--against none: neonlite timed alone") if args.against == "none" \
        else _torch_device(args.backend)
    if args.against == "torch" and device is None:
        print(f"python -m benchmarks.run: error: --against torch: {note}", file=sys.stderr)
        return 1
    repeats = args.repeats or (2 if args.smoke else 15)
    peak, peak_note = cpu_peak_gflops() if args.backend == "cpu" else (None, "")
    rows, failed = [], 0
    for name in names:
        try:
            row = run_workload(workloads[name], args.backend, device, args.smoke, repeats)
        except Exception as err:  # one broken workload is a row saying why; the rest still run
            traceback.print_exc()
            first_line = str(err).splitlines()[0] if str(err) else ""
            row = {"workload": name, "figure": workloads[name].FIGURE,
                   "error": f"{type(err).__name__}: {first_line}"}
            row["note"] = "FAILED: " + row["error"][:200]
            failed += 1
        rows.append(row)
        print(format_table([row], "").splitlines()[-1], file=sys.stderr, flush=True)
        if args.json:  # after every row, so a run stopped part-way keeps what it measured
            with atomic_write(args.json) as f:
                f.write(json.dumps({"backend": args.backend, "smoke": args.smoke, "rows": rows,
                                    "cpu_peak_gflops": peak}, indent=2).encode())
    print(format_table(rows, note))
    if peak:
        print(f"CPU peak: {peak:.0f} GFLOP/s = {peak_note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
