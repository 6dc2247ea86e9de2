"""bfloat16 training on the CPU against float32, each contender in a process of its own (issue
36): ``python -m benchmarks.bf16_training [--row NAME|all] [--rounds N] [--warmup W] [--smoke]
[--contenders NAME,...] [--json OUT]``, and the loss comparison ``--steps 300 [--text PATH]``.

Timing: the contenders of a row of :mod:`.workloads.bf16_training` (``gpt512_bf16``,
``nanogpt_bf16``, ``lenet_bf16``): neonlite ``-d bf16``, neonlite float32, PyTorch float32 and
PyTorch ``torch.autocast("cpu", dtype=torch.bfloat16)``, on the same model and batch, each
built in a worker process of its own (one library's idle OpenMP threads never share a process
with another's, and each has its own peak resident memory).  After ``--warmup`` steps each,
``--rounds`` rounds run one step of every contender in turn (the first contender rotating
round by round), with a pause between contenders for the previous one's threads to go to
sleep (``--contenders`` runs only the named ones: on a CPU where PyTorch's bf16 runs at a
few GFLOP/s, autocast's steps on the d_model 512 model take most of a minute each); the table
gives the median step, the throughput, the peak resident memory, what the model and its step
added to that peak after the imports (``model MiB``: 0 where the imports' own passing peak was
higher) and the resident memory the model and its steps hold at the end beyond what the
process held after its imports (``held MiB``: Linux), then bf16 against each other contender.
The header names the CPU, whether it has AVX512-BF16 and AMX-BF16, the path each op class
takes on bf16 data here (``neonlite doctor``) and the load average around the run.

Loss (``--steps N``): the row's language model trained for N steps on the text (default Tiny
Shakespeare) with the example's schedule, once ``-d bf16`` and once ``-d f32``, each in a
process of its own, on the same batches (same seed); prints both runs' mean training loss over
the last 10 steps, the last step's loss and the validation loss, and their differences against
the issue's bound of 0.02 nats.  ``--bf16-rounding nearest|stochastic|both`` picks how the bf16
run rounds its weight copies (``both``: one bf16 run each; default: the recipe's).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from .workloads import bf16_training, nanogpt

CONTENDERS = ("neonlite_bf16", "neonlite_f32", "torch_f32", "torch_autocast")
DEFAULT_TEXT = "/work/shared/data/text/tinyshakespeare.txt"
#: seconds between two contenders' steps: OpenMP threads spin for a while after a parallel
#: region (Intel's KMP_BLOCKTIME is 200 ms) and must not steal the next contender's cores
SETTLE = 0.3
#: the issue's bound on |bf16 loss - f32 loss| after 300 steps
LOSS_BOUND = 0.02
TAIL = 10


#: the folder holding ``benchmarks/``: the workers find the package there, whatever the
#: caller's working folder or ``PYTHONSAFEPATH``
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a worker's program: ``ROOT`` goes at the END of its path, after the installed packages, so
#: that ``neonlite`` is the installed one (the checkout's ``neonlite/`` folder alone is not the
#: package: the wheel maps the top-level folders into it) and ``benchmarks`` the checkout's
WORKER = ("import sys; sys.path.append(sys.argv.pop(1)); "
          "from benchmarks.bf16_training import main; sys.exit(main(sys.argv[1:]))")


def _module_argv(*args):
    """``python -m benchmarks.bf16_training ARGS`` as a worker runs it, and its environment."""
    return [sys.executable, "-c", WORKER, ROOT, *args], dict(os.environ)


def _rss_mib():
    """The process's peak resident memory so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _resident_mib():
    """The process's resident memory now, MiB (Linux's /proc/self/statm; the peak elsewhere):
    the imports' passing peak (mapping MKL, building kernels) can exceed what a small model and
    its step hold, which the peak alone then hides."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return _rss_mib()
    return pages * os.sysconf("SC_PAGE_SIZE") / 2.0 ** 20


def _reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _build(row, contender, smoke):
    """(step, work) of ``contender`` of ``row`` (a :class:`~.workloads.bf16_training.Bf16Row`)."""
    if contender == "neonlite_bf16":
        return row.neonlite(None, smoke)
    if contender == "neonlite_f32":
        from neonlite import gen_backend
        return row.recipe.neonlite(lambda batch: gen_backend("cpu", batch_size=batch,
                                                             rng_seed=0), smoke)
    return row.recipe.torch("cpu", smoke, autocast=contender == "torch_autocast")


def worker(row_name, contender, smoke):
    """The worker process: build, say ``ready`` (work per step, memory, bf16 paths), then run
    ``{"steps": k}`` requests until ``{"quit": true}``, answering each with the seconds of
    each step, and the last with the peak resident memory."""
    import neonlite  # noqa: F401  (the imports count in the base, not in the model)
    if contender.startswith("torch"):
        import torch  # noqa: F401
    base, held_base = _rss_mib(), _resident_mib()
    row = next(r for r in bf16_training.WORKLOADS if r.NAME == row_name)
    step, work = _build(row, contender, smoke)
    paths = {}
    if contender == "neonlite_bf16":
        from neonlite import get_backend
        paths = dict(get_backend().bf16_choice().paths)
    _reply({"ready": True, "work": work, "base_mib": base, "paths": paths})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            _reply({"peak_mib": _rss_mib(), "base_mib": base,
                    "held_mib": _resident_mib() - held_base})
            return
        seconds = []
        for _ in range(request["steps"]):
            start = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - start)
        _reply({"seconds": seconds})


class _Worker:
    def __init__(self, row, contender, smoke):
        argv, env = _module_argv("--worker", row, contender, *(["--smoke"] if smoke else []))
        self.name = contender
        self.proc = subprocess.Popen(argv, text=True, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.ready = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} ended (status {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        done = self.ask(quit=True)
        self.proc.wait()
        return done


def _available(row, wanted=CONTENDERS):
    """The contenders of ``wanted`` that can run here, and a note for each one that cannot or
    was not asked for."""
    names, notes = [], []
    reason = row.unavailable(False)
    for name in CONTENDERS:
        if name not in wanted:
            notes.append(f"{name} left out: not in --contenders")
            continue
        if name == "neonlite_bf16" and reason:
            notes.append(f"neonlite_bf16 left out: {reason}")
            continue
        if name.startswith("torch"):
            try:
                import torch  # noqa: F401
            except ImportError:
                notes.append(f"{name} left out: PyTorch is not installed")
                continue
        names.append(name)
    return names, notes


def time_row(row, rounds, warmup, smoke, wanted=CONTENDERS):
    """The timing result of one row (a dict; see the module docstring) for the contenders of
    ``wanted``."""
    names, notes = _available(row, wanted)
    workers = [_Worker(row.NAME, name, smoke) for name in names]
    load_before = os.getloadavg()
    try:
        for w in workers:
            w.ask(steps=warmup)
            time.sleep(SETTLE)
        samples = {w.name: [] for w in workers}
        for r in range(rounds):
            for w in workers[r % len(workers):] + workers[:r % len(workers)]:
                samples[w.name] += w.ask(steps=1)["seconds"]
                time.sleep(SETTLE)
    finally:
        memory = {w.name: w.close() for w in workers}
    result = {"row": row.NAME, "figure": row.FIGURE, "rounds": rounds, "notes": notes,
              "load_before": load_before, "load_after": os.getloadavg(), "contenders": {}}
    for w in workers:
        median = statistics.median(samples[w.name])
        result["contenders"][w.name] = {
            "median_s": median, "rate": w.ready["work"] / median,
            "peak_mib": memory[w.name]["peak_mib"],
            "added_mib": memory[w.name]["peak_mib"] - memory[w.name]["base_mib"],
            "held_mib": memory[w.name]["held_mib"]}
        if w.ready["paths"]:
            result["bf16_paths"] = w.ready["paths"]
    return result


def cpu_header():
    """The CPU named as neonlite names it, with its bf16 instruction sets."""
    from neonlite.cpu_peak import cpu_names
    from neonlite.kernels.cpu_features import amx_bf16_state, has_avx512_bf16
    amx, why = amx_bf16_state()
    return (f"CPU: {cpu_names()}; {len(os.sched_getaffinity(0))} cores; AVX512-BF16 "
            f"{'yes' if has_avx512_bf16() else 'no'}; AMX-BF16 {'yes' if amx else 'no'} "
            f"({why})")


def _ratio(a, b):
    """``a / b`` as ``0.50x``, or ``-`` where b is not positive."""
    return f"{a / b:.2f}x" if b > 0 else "-"


def format_timing(result):
    c = result["contenders"]
    lines = [f"{result['row']}: median of {result['rounds']} alternating steps",
             f"  {'contender':<16}{result['figure']:>12}{'step ms':>10}{'peak MiB':>10}"
             f"{'model MiB':>11}{'held MiB':>10}"]
    for name, r in c.items():
        lines.append(f"  {name:<16}{r['rate']:>12.1f}{r['median_s'] * 1e3:>10.1f}"
                     f"{r['peak_mib']:>10.0f}{r['added_mib']:>11.0f}{r['held_mib']:>10.0f}")
    if "neonlite_bf16" in c:
        bf16 = c["neonlite_bf16"]
        for other in CONTENDERS[1:]:
            if other in c:
                lines.append(f"  bf16 / {other}: {bf16['rate'] / c[other]['rate']:.2f}x speed, "
                             f"{bf16['peak_mib'] / c[other]['peak_mib']:.2f}x peak memory, "
                             f"{_ratio(bf16['held_mib'], c[other]['held_mib'])} held")
    if "bf16_paths" in result:
        lines.append("  bf16 paths: " + ", ".join(f"{k} {v}" for k, v in
                                                   result["bf16_paths"].items()))
    lines += [f"  {note}" for note in result["notes"]]
    lines.append(f"  load average {result['load_before'][0]:.2f} -> "
                 f"{result['load_after'][0]:.2f}")
    return "\n".join(lines)


def loss_worker(row_name, datatype, steps, text, rounding=None):
    """Train the row's language model ``steps`` steps in ``datatype`` (bf16 copies rounded as
    ``rounding`` says; None: the recipe's default); print the per-step training losses and
    the validation loss as JSON."""
    from neonlite.cli.text_examples import train_text_lm, transformer_optimizer
    recipe = bf16_training.RECIPES[row_name]
    n, T, d, heads, blocks = recipe.sizes(False)
    optimizer = transformer_optimizer(steps, bf16_training.GPT512_LR) \
        if row_name == "gpt512_bf16" else nanogpt.neonlite_optimizer()
    start = time.perf_counter()
    _, _, losses, valid = train_text_lm(
        lambda vocab: nanogpt.neonlite_model(T, d, heads, blocks, vocab=vocab), optimizer,
        text, steps, "cpu", n, 0, T, 50, sys.stderr, datatype=datatype, bf16_rounding=rounding)
    _reply({"losses": [float(x) for x in losses], "valid": float(valid),
            "seconds": time.perf_counter() - start, "peak_mib": _rss_mib()})


def compare_losses(row_name, steps, text, roundings=(None,)):
    """The runs of the loss comparison, one process each: one bf16 run per rounding of
    ``roundings`` (None: the recipe's default), then float32; returns the result dict."""
    runs = {}
    for name, datatype, rounding in [(f"bf16 {r}" if r else "bf16", "bf16", r)
                                     for r in roundings] + [("f32", "f32", None)]:
        extra = ("--bf16-rounding", rounding) if rounding else ()
        argv, env = _module_argv("--loss-worker", row_name, datatype, "--steps", str(steps),
                                 "--text", text, *extra)
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=True)
        run = json.loads(done.stdout.strip().splitlines()[-1])
        run["tail_mean"] = statistics.fmean(run["losses"][-TAIL:])
        runs[name] = run
    diffs = {name: {key: run[key] - runs["f32"][key] for key in ("tail_mean", "valid")}
             for name, run in runs.items() if name != "f32"}
    return {"row": row_name, "steps": steps, "runs": runs, "diffs": diffs,
            "within": {name: all(abs(v) <= LOSS_BOUND for v in d.values())
                       for name, d in diffs.items()}}


def format_losses(result):
    lines = [f"{result['row']}: {result['steps']} steps, -d bf16 against -d f32"]
    for datatype, run in result["runs"].items():
        lines.append(f"  {datatype:<15} training loss (mean of the last {TAIL}) "
                     f"{run['tail_mean']:.4f}, last {run['losses'][-1]:.4f}, validation "
                     f"{run['valid']:.4f} nats/char; {run['seconds']:.0f} s, peak "
                     f"{run['peak_mib']:.0f} MiB")
    for name, d in result["diffs"].items():
        lines.append(f"  {name} - f32: training {d['tail_mean']:+.4f}, validation "
                     f"{d['valid']:+.4f} ({'within' if result['within'][name] else 'NOT within'}"
                     f" {LOSS_BOUND})")
    return "\n".join(lines)


def _contenders(text):
    """``--contenders``' value: a tuple of known contender names."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in CONTENDERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{','.join(unknown) or 'nothing'}: expected names "
                                         f"from {','.join(CONTENDERS)}")
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16_training",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="gpt512_bf16",
                        choices=list(bf16_training.RECIPES) + ["all"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (timing only)")
    parser.add_argument("--steps", type=int, help="the loss comparison: steps per run")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--bf16-rounding", choices=("nearest", "stochastic", "both"),
                        help="the loss comparison: how the bf16 run rounds its weight copies "
                             "(both: a bf16 run each; default: the recipe's)")
    parser.add_argument("--contenders", type=_contenders, default=CONTENDERS,
                        help=f"comma-separated, of {','.join(CONTENDERS)} (default: all)")
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--worker", nargs=2, metavar=("ROW", "CONTENDER"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--loss-worker", nargs=2, metavar=("ROW", "DATATYPE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(*args.worker, args.smoke)
    if args.loss_worker:
        return loss_worker(*args.loss_worker, args.steps, args.text, args.bf16_rounding)
    print(cpu_header(), flush=True)
    if args.steps:
        if args.row not in ("gpt512_bf16", "nanogpt_bf16"):
            parser.error("--steps: the loss comparison trains a language model: --row "
                         "gpt512_bf16 or nanogpt_bf16")
        roundings = ("nearest", "stochastic") if args.bf16_rounding == "both" else \
            (args.bf16_rounding,)
        results = [compare_losses(args.row, args.steps, args.text, roundings)]
        print(format_losses(results[0]))
    else:
        rows = bf16_training.WORKLOADS if args.row == "all" else \
            [r for r in bf16_training.WORKLOADS if r.NAME == args.row]
        results = []
        for row in rows:
            results.append(time_row(row, args.rounds, args.warmup, args.smoke,
                                    args.contenders))
            print(format_timing(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_header(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
