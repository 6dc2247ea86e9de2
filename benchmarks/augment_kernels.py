"""The augmentation kernels alone, in images/s, beside torchvision.transforms.v2 on uint8
tensors: ``python -m benchmarks.augment_kernels [--torchvision-python PY] [--threads N]
[--repeats N] [--json OUT] [--smoke]``.

Two rows, on random uint8 images held in memory (no decoding):

- ``cifar_pad4_flip_norm``: 32x32x3, pad 4 + random 32x32 crop + flip + normalise to float32,
  batches of 128;
- ``rrc224_flip_norm``: 500x375 (W x H) x3, random-resized crop to 224x224 (bilinear) + flip +
  normalise to float32, batches of 32.

neonlite: one ``Pipeline.apply`` per batch (the C kernels, OpenMP over the samples, ``--threads``
threads).  torchvision: ``v2.Compose([RandomCrop(32, padding=4) or RandomResizedCrop(224,
antialias=True), RandomHorizontalFlip(), ToDtype(float32, scale=True), Normalize(...)])`` on
each (3, H, W) uint8 tensor of the batch, as a ``DataLoader`` worker applies it, then
``torch.stack``, with ``torch.set_num_threads(--threads)``; it runs in its own process under
``--torchvision-python`` (default ``$NEONLITE_TORCHVISION_PYTHON``; a Python with torch and
torchvision, since torchvision need not be installed beside neonlite), which prints its own
medians.  Figures are medians of ``--repeats`` batches after warm-up; ``ratio`` is
neonlite / torchvision images/s (> 1: neonlite is faster).  Run it on an idle machine.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

from .timing import time_alternating

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
#: name -> (H, W, batch, smoke batch, description)
ROWS = {"cifar_pad4_flip_norm": (32, 32, 128, 8, "32x32 pad-4 crop + flip + normalise"),
        "rrc224_flip_norm": (375, 500, 32, 2, "500x375 random-resized crop 224 + flip + "
                                              "normalise")}

TORCHVISION = r"""
import json, statistics, sys, time
import torch
from torchvision.transforms import v2
name, h, w, batch, repeats, threads = sys.argv[1], *map(int, sys.argv[2:7])
torch.set_num_threads(threads)
torch.manual_seed(0)
first = (v2.RandomCrop(32, padding=4) if name.startswith("cifar")
         else v2.RandomResizedCrop(224, antialias=True))
pipe = v2.Compose([first, v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                   v2.Normalize(%r, %r)])
images = torch.randint(0, 256, (batch, 3, h, w), dtype=torch.uint8)
def step():
    return torch.stack([pipe(images[i]) for i in range(batch)])
for _ in range(2):
    step()
times = []
for _ in range(repeats):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
print(json.dumps({"seconds": statistics.median(times),
                  "torch": torch.__version__, "torchvision": __import__("torchvision").__version__}))
""" % (MEAN, STD)


def neonlite_step(name, h, w, batch):
    """The batch call of row ``name``: ``step()`` augments one batch of random images."""
    from neonlite.data.augment import (Flip, Normalize, PadCrop, Pipeline,
                                       RandomResizedCrop)
    first = PadCrop(32, pad=4) if name.startswith("cifar") else RandomResizedCrop(224)
    pipeline = Pipeline([first, Flip(), Normalize(MEAN, STD)])
    images = np.random.default_rng(0).integers(0, 256, (batch, h, w, 3), dtype=np.uint8)
    out = np.empty((batch,) + pipeline.out_shape((h, w, 3)), np.float32)
    indices = np.arange(batch, dtype=np.int64)
    counter = iter(range(1 << 62))

    def step():
        pipeline.apply(images, indices, next(counter), out)
    return step


def torchvision_seconds(python, name, h, w, batch, repeats, threads):
    """torchvision's median seconds per batch (and versions), or None and why not."""
    if not python:
        return None, ("no --torchvision-python (or $NEONLITE_TORCHVISION_PYTHON): "
                      "neonlite timed alone")
    try:
        done = subprocess.run([python, "-c", TORCHVISION, name, str(h), str(w), str(batch),
                               str(repeats), str(threads)], capture_output=True, text=True,
                              timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"torchvision did not run: {err}"
    if done.returncode != 0:
        return None, f"torchvision failed: {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def run(args):
    from neonlite.backends.cpu.threads import set_cpu_threads
    set_cpu_threads(args.threads)
    rows = []
    for name, (h, w, batch, smoke_batch, what) in ROWS.items():
        batch = smoke_batch if args.smoke else batch
        repeats = 2 if args.smoke else args.repeats
        seconds = time_alternating({"neonlite": neonlite_step(name, h, w, batch)},
                                   repeats)["neonlite"]
        row = {"workload": name, "what": what, "batch": batch, "threads": args.threads,
               "neonlite": batch / seconds}
        theirs, note = torchvision_seconds(args.torchvision_python, name, h, w, batch,
                                           repeats, args.threads)
        if theirs is not None:
            row["torchvision"] = batch / theirs["seconds"]
            row["ratio"] = row["neonlite"] / row["torchvision"]
            row["versions"] = {"torch": theirs["torch"], "torchvision": theirs["torchvision"]}
        else:
            row["note"] = note
        rows.append(row)
    return rows


def format_rows(rows):
    lines = [f"{'workload':<22} {'threads':>7} {'neonlite img/s':>15} {'torchvision img/s':>18} "
             f"{'ratio':>6}"]
    for r in rows:
        tv = f"{r['torchvision']:.0f}" if "torchvision" in r else "-"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        lines.append(f"{r['workload']:<22} {r['threads']:>7} {r['neonlite']:>15.0f} {tv:>18} "
                     f"{ratio:>6}" + (f"  ({r['note']})" if "note" in r else ""))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.augment_kernels",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--torchvision-python",
                        default=os.environ.get("NEONLITE_TORCHVISION_PYTHON"),
                        help="a Python with torch and torchvision (torchvision's side)")
    parser.add_argument("--threads", type=int, default=1, help="threads of both (default 1)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--smoke", action="store_true", help="tiny batches, no claims")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.repeats < 1:
        parser.error("--threads and --repeats must be at least 1")
    rows = run(args)
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
