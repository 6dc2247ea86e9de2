"""Throughput of the whole image pipeline, side by side in one run: neonlite's ImageFolder
with 2 loader workers against ``torch.utils.data.DataLoader(num_workers=2)`` on the same files
(torchvision's ``decode_image`` + ``transforms.v2`` on uint8 tensors, and the Pillow loader).

    python -m benchmarks.image_loader [--torch-python PY] [--workers 2] [--smoke]

Rows: (a) 32x32 PNG decode + pad-4 random crop + flip + normalise; (b) JPEG (about 500x375,
quality 90) decode + random-resized crop to 224 + flip + normalise, also with neonlite's JPEG
files decoded whole by Pillow (``NEONLITE_JPEG_KERNEL=0``: the loader before the
region-of-interest kernel).  Files are generated into
a temporary folder.  Each figure is the images/s of the last of ``--epochs`` epochs (the
first starts the workers); "per worker" divides by the number of workers.  The PyTorch rows
run ``benchmarks/image_loader_torch.py`` under ``--torch-python`` (default
/work/venvs/tv/bin/python where it exists, else this interpreter), which needs torchvision.
Timings from a loaded machine mean nothing: rerun on an idle one.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.image_folders import jpeg_folder, random_folder
from neonlite.data.jpeg_kernel import ENV as JPEG_KERNEL_ENV

HERE = Path(__file__).resolve().parent
MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]
AUGMENT = {"png32": [{"type": "pad_crop", "config": {"size": 32, "pad": 4}}, "flip"],
           "jpeg224": [{"type": "random_resized_crop", "config": {"size": 224}}, "flip"]}
ROWS = {"png32": "(a) 32x32 PNG + pad-4 crop + flip + normalise",
        "jpeg224": "(b) JPEG ~500x375 q90 + random-resized crop 224 + flip + normalise"}


def neonlite_rate(root, kind, workers, batch, epochs):
    """images/s of the last of ``epochs`` epochs of ImageFolder's training iterator."""
    from neonlite import gen_backend
    from neonlite.data import ImageFolder
    gen_backend("cpu", batch_size=batch, rng_seed=0)
    augment = AUGMENT[kind] + [{"type": "normalize", "config": {"mean": MEAN, "std": STD}}]
    data = ImageFolder(root=str(root), augment=augment, num_workers=workers)
    rates = []
    try:
        for _ in range(epochs):
            start, count = time.perf_counter(), 0
            for _ in data.train_iter:
                count += data.train_iter.valid
            rates.append(count / (time.perf_counter() - start))
    finally:
        data.close()
    return rates[-1]


def torch_rate(python, root, kind, decoder, workers, batch, epochs):
    done = subprocess.run([python, str(HERE / "image_loader_torch.py"), str(root), kind, decoder,
                           "--workers", str(workers), "--batch", str(batch), "--epochs",
                           str(epochs)], capture_output=True, text=True, timeout=3600)
    if done.returncode:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    return json.loads(done.stdout.strip().splitlines()[-1])["images_per_s"], None


def default_torch_python():
    tv = Path("/work/venvs/tv/bin/python")
    return str(tv) if tv.exists() else sys.executable


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", default=default_torch_python())
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny folders, no claims")
    parser.add_argument("--only", choices=tuple(ROWS))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="image-loader-"))
    sizes = {"png32": (128 if args.smoke else 10000, 128), "jpeg224": (32 if args.smoke else
                                                                      1000, 32)}
    print(f"| pipeline | loader | images/s | per worker | neonlite / this |\n|---|---|---|---|---|")
    for kind in ([args.only] if args.only else ROWS):
        count, batch = sizes[kind]
        root = work / kind
        (random_folder(root, 32, count) if kind == "png32" else jpeg_folder(root, count))
        ours = neonlite_rate(root, kind, args.workers, batch, args.epochs)
        print(f"| {ROWS[kind]} | neonlite ImageFolder | {ours:,.0f} | "
              f"{ours / args.workers:,.0f} | 1.00x |", flush=True)
        if kind == "jpeg224":
            os.environ[JPEG_KERNEL_ENV] = "0"
            try:
                whole = neonlite_rate(root, kind, args.workers, batch, args.epochs)
            finally:
                os.environ.pop(JPEG_KERNEL_ENV)
            print(f"| {ROWS[kind]} | neonlite, Pillow decoding whole JPEGs | {whole:,.0f} | "
                  f"{whole / args.workers:,.0f} | {ours / whole:.2f}x |", flush=True)
        for decoder in ("decode_image", "pillow"):
            rate, why = torch_rate(args.torch_python, root, kind, decoder, args.workers, batch,
                                   args.epochs)
            if rate is None:
                print(f"| {ROWS[kind]} | DataLoader + {decoder} | ({why}) | | |", flush=True)
                continue
            print(f"| {ROWS[kind]} | DataLoader + {decoder} + v2 | {rate:,.0f} | "
                  f"{rate / args.workers:,.0f} | {ours / rate:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
