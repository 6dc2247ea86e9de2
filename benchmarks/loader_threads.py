"""Loader workers as threads or as processes: images/s of the same batches (decode 32x32 PNGs
+ pad-4 crop + flip + normalise, or ~500x375 JPEGs + random-resized crop 224) made by 1 and N
threads of this process (Pillow releases the GIL while it decodes; the rest of a batch holds
it) and by ImageFolder's N loader processes.  The reason ``image_workers.py`` uses processes.

    python -m benchmarks.loader_threads [--workers 2] [--kind png32|jpeg224] [--count N]
"""
import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from neonlite import gen_backend
from neonlite.data import ImageFolder

from benchmarks.image_folders import jpeg_folder, random_folder
from benchmarks.image_loader import AUGMENT, MEAN, STD


def thread_rate(data, threads, batch):
    """images/s of every training batch made by ``threads`` threads (each its own output)."""
    maker, files = data.train_iter.maker, data.files["train"]
    order = np.arange(len(files))
    batches = [order[i:i + batch] for i in range(0, len(order) - batch + 1, batch)]
    outs = [np.empty((batch,) + data.shape, np.float32) for _ in range(threads)]
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: maker.make(batches[k], 1, outs[k % threads]),
                      range(len(batches))))
    return len(batches) * batch / (time.perf_counter() - start)


def process_rate(data):
    it = data.train_iter
    for _ in it:
        pass
    start, count = time.perf_counter(), 0
    for _ in it:
        count += it.valid
    return count / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kind", choices=tuple(AUGMENT), default="png32")
    parser.add_argument("--count", type=int, default=None)
    args = parser.parse_args(argv)
    batch = 128 if args.kind == "png32" else 32
    count = args.count or (5000 if args.kind == "png32" else 500)
    root = Path(tempfile.mkdtemp(prefix="loader-threads-")) / args.kind
    (random_folder(root, 32, count) if args.kind == "png32" else jpeg_folder(root, count))
    gen_backend("cpu", batch_size=batch, rng_seed=0)
    augment = AUGMENT[args.kind] + [{"type": "normalize", "config": {"mean": MEAN, "std": STD}}]
    data = ImageFolder(root=str(root), augment=augment, num_workers=args.workers)
    try:
        for threads in sorted({1, args.workers}):
            print(f"{args.kind}: {threads} thread(s): {thread_rate(data, threads, batch):,.0f} "
                  f"images/s", flush=True)
        print(f"{args.kind}: {args.workers} processes: {process_rate(data):,.0f} images/s")
    finally:
        data.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
