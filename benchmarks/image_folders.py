"""Image folders written from arrays, for the image-folder example, tests and benchmarks:
``DIR/train/<class>/<n>.png`` and ``DIR/valid/<class>/<n>.png``.

    python benchmarks/image_folders.py mnist DIR [--data-dir D] [--train 8000]
        the real MNIST digits of D/mnist/t10k-* (8,000 train, the other 2,000 valid)
    python benchmarks/image_folders.py random DIR --size 32 --count 5000
        random RGB PNGs in 10 classes (for throughput)
    python benchmarks/image_folders.py jpeg DIR --count 1000
        random ~500x375 JPEGs (quality 90) of smooth colour fields in 10 classes
"""
import argparse
import sys
from pathlib import Path

import numpy as np


def write_folder(root, images, labels, split_at, fmt="png", quality=90):
    """Write uint8 ``images`` (N, H, W) or (N, H, W, C) with class ``labels`` (N,) under
    ``root``: the first ``split_at`` in ``train/``, the rest in ``valid/``; returns root."""
    from PIL import Image
    root = Path(root)
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / ("train" if i < split_at else "valid") / str(int(label))
        folder.mkdir(parents=True, exist_ok=True)
        picture = Image.fromarray(np.asarray(image).squeeze())
        if fmt == "png":
            picture.save(folder / f"{i:06d}.png")
        else:
            picture.save(folder / f"{i:06d}.jpg", quality=quality)
    return root


def mnist_folder(root, data_dir, train=8000, count=10000):
    """The first ``count`` MNIST t10k digits as PNGs (``train`` of them in train/)."""
    from neonlite.data.idx import read_idx
    mnist = Path(data_dir) / "mnist"
    images = read_idx(_found(mnist, "t10k-images-idx3-ubyte"))[:count]
    labels = read_idx(_found(mnist, "t10k-labels-idx1-ubyte"))[:count]
    return write_folder(root, images, labels, train)


def random_folder(root, size=32, count=5000, classes=10, seed=0):
    """``count`` random RGB ``size`` x ``size`` PNGs in ``classes`` classes (all train/
    but a tenth)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8)
    return write_folder(root, images, rng.integers(0, classes, count), count - count // 10)


def jpeg_folder(root, count=1000, classes=10, seed=0):
    """``count`` JPEGs (quality 90) of about 500x375 (sizes vary by a few pixels), smooth
    colour fields with noise, so they compress like photographs."""
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(count):
        h, w = 375 + int(rng.integers(-8, 9)), 500 + int(rng.integers(-8, 9))
        yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
        base = np.stack([np.sin(6 * (a * yy + b * xx) + c) for a, b, c in rng.random((3, 3))],
                        axis=-1)
        noise = rng.normal(0, 0.08, (h, w, 3))
        images.append(np.clip((base * 0.5 + 0.5 + noise) * 255, 0, 255).astype(np.uint8))
    labels = rng.integers(0, classes, count)
    return write_folder(root, images, labels, count - count // 10, fmt="jpeg")


def _found(folder, name):
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"image_folders: {folder} has no {name}(.gz)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("mnist", "random", "jpeg"))
    parser.add_argument("root")
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] /
                                                  "shared" / "data"))
    parser.add_argument("--train", type=int, default=8000)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--count", type=int, default=5000)
    args = parser.parse_args(argv)
    if args.kind == "mnist":
        mnist_folder(args.root, args.data_dir, args.train)
    elif args.kind == "random":
        random_folder(args.root, args.size, args.count)
    else:
        jpeg_folder(args.root, args.count)
    print(args.root)


if __name__ == "__main__":
    sys.exit(main())
