"""Throughput of the whole image pipeline, side by side in one run: neonlite's ImageFolder
with 2 loader workers against ``torch.utils.data.DataLoader(num_workers=2)`` on the same files
(torchvision's ``decode_image`` + ``transforms.v2`` on uint8 tensors, and the Pillow loader).

    python -m benchmarks.image_loader [--torch-python PY] [--workers 2] [--smoke]

Rows: (a) 32x32 PNG decode + pad-4 random crop + flip + normalise; (b) JPEG (about 500x375,
quality 90) decode + random-resized crop to 224 + flip + normalise, also with neonlite's JPEG
files decoded whole by Pillow (``NEONLITE_JPEG_KERNEL=0``: the loader before the
region-of-interest kernel).  Files are generated into
a temporary folder.  Each figure is the images/s of the last of ``--epochs`` epochs (the
first starts the workers); every loader runs ``--rounds`` times, the loaders alternating, and
the table gives the medians; "per worker" divides by the number of workers.  "CPU ms /
image" is the CPU time the epoch took per image, the process and its workers together (a
loaded machine disturbs it much less than images/s); "cores busy" is images/s times it: on
an idle machine, how many cores the loader kept at work (2 workers: at most about 2).  The PyTorch rows
run ``benchmarks/image_loader_torch.py`` under ``--torch-python`` (default
/work/venvs/tv/bin/python where it exists, else this interpreter), which needs torchvision.
Timings from a loaded machine mean nothing: rerun on an idle one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.image_folders import jpeg_folder, random_folder
from benchmarks.process_cpu import tree_seconds
from neonlite.data.jpeg_kernel import ENV as JPEG_KERNEL_ENV

HERE = Path(__file__).resolve().parent
MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]
AUGMENT = {"png32": [{"type": "pad_crop", "config": {"size": 32, "pad": 4}}, "flip"],
           "jpeg224": [{"type": "random_resized_crop", "config": {"size": 224}}, "flip"]}
ROWS = {"png32": "(a) 32x32 PNG + pad-4 crop + flip + normalise",
        "jpeg224": "(b) JPEG ~500x375 q90 + random-resized crop 224 + flip + normalise"}


def neonlite_rate(root, kind, workers, batch, epochs):
    """(images/s, CPU ms per image of this process and its loader workers) of the last of
    ``epochs`` epochs of ImageFolder's training iterator."""
    from neonlite import gen_backend
    from neonlite.data import ImageFolder
    gen_backend("cpu", batch_size=batch, rng_seed=0)
    augment = AUGMENT[kind] + [{"type": "normalize", "config": {"mean": MEAN, "std": STD}}]
    data = ImageFolder(root=str(root), augment=augment, num_workers=workers)
    rates, iterator = [], data.train_iter
    try:
        for _ in range(epochs):
            pids = [w.proc.pid for w in iterator._pool.workers] if iterator._pool else []
            start, cpu, count = time.perf_counter(), tree_seconds(pids), 0
            for _ in iterator:
                count += iterator.valid
            pids = [w.proc.pid for w in iterator._pool.workers] if iterator._pool else []
            rates.append((count / (time.perf_counter() - start),
                          (tree_seconds(pids) - cpu) * 1e3 / count))
    finally:
        data.close()
    return rates[-1]


def torch_rate(python, root, kind, decoder, workers, batch, epochs):
    """((images/s, CPU ms per image) of the DataLoader's last epoch, None), or (None, why)."""
    done = subprocess.run([python, str(HERE / "image_loader_torch.py"), str(root), kind, decoder,
                           "--workers", str(workers), "--batch", str(batch), "--epochs",
                           str(epochs)], capture_output=True, text=True, timeout=3600)
    if done.returncode:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return (result["images_per_s"], result["cpu_ms_per_image"]), None


def default_torch_python():
    tv = Path("/work/venvs/tv/bin/python")
    return str(tv) if tv.exists() else sys.executable


def _contenders(args, root, kind, batch):
    """(label, no-argument function giving images/s or (None, why)) of each loader of row
    ``kind``."""
    def ours():
        return neonlite_rate(root, kind, args.workers, batch, args.epochs), None

    def whole():
        os.environ[JPEG_KERNEL_ENV] = "0"
        try:
            return neonlite_rate(root, kind, args.workers, batch, args.epochs), None
        finally:
            os.environ.pop(JPEG_KERNEL_ENV)

    def torch(decoder):
        return lambda: torch_rate(args.torch_python, root, kind, decoder, args.workers, batch,
                                  args.epochs)

    rows = [("neonlite ImageFolder", ours)]
    if kind == "jpeg224":
        rows.append(("neonlite, Pillow decoding whole JPEGs", whole))
    return rows + [(f"DataLoader + {decoder} + v2", torch(decoder))
                   for decoder in ("decode_image", "pillow")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", default=default_torch_python())
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5,
                        help="runs of every loader, alternating; the figure is their median")
    parser.add_argument("--smoke", action="store_true", help="tiny folders, no claims")
    parser.add_argument("--only", choices=tuple(ROWS))
    args = parser.parse_args(argv)
    rounds = 1 if args.smoke else max(1, args.rounds)
    work = Path(tempfile.mkdtemp(prefix="image-loader-"))
    sizes = {"png32": (128 if args.smoke else 10000, 128), "jpeg224": (32 if args.smoke else
                                                                      1000, 32)}
    print("| pipeline | loader | images/s | per worker | neonlite / this | CPU ms / image | "
          "this / neonlite (CPU) | cores busy |\n|---|---|---|---|---|---|---|---|")
    for kind in ([args.only] if args.only else ROWS):
        count, batch = sizes[kind]
        root = work / kind
        (random_folder(root, 32, count) if kind == "png32" else jpeg_folder(root, count))
        contenders = _contenders(args, root, kind, batch)
        rates = {label: [] for label, _ in contenders}
        failed = {}
        for _ in range(rounds):
            for label, run in contenders:
                if label in failed:
                    continue
                got, why = run()
                if got is None:
                    failed[label] = why
                    continue
                rates[label].append(got)
        ours = [statistics.median(r) for r in zip(*rates["neonlite ImageFolder"])]
        for label, _ in contenders:
            if label in failed:
                print(f"| {ROWS[kind]} | {label} | ({failed[label]}) | | | | | |", flush=True)
                continue
            rate, cpu = (statistics.median(r) for r in zip(*rates[label]))
            print(f"| {ROWS[kind]} | {label} | {rate:,.0f} | {rate / args.workers:,.0f} | "
                  f"{ours[0] / rate:.2f}x | {cpu:.2f} | {cpu / ours[1]:.2f}x | "
                  f"{rate * cpu / 1e3:.2f} |", flush=True)
    print(f"medians of {rounds} runs per loader, alternating; each run the images/s of the "
          f"last of {args.epochs} epochs, and the CPU time it took per image (the process and "
          f"its loader workers): on a loaded machine the wall clock stretches, the CPU time "
          f"much less, so the CPU ratio estimates the idle machine's images/s ratio when the "
          f"loaders keep every core busy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
