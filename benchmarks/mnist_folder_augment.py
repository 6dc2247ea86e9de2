"""Learning with augmentation on real data: the LeNet-style CNN of
``examples/image_folder_cnn.yaml`` trained on 8,000 real MNIST digits read from a PNG folder
and validated on the other 2,000, with a random crop (pad 2) and without, same seeds and
epochs; prints each run's validation error and the mean of each arm.

    python benchmarks/mnist_folder_augment.py [--data-dir D] [--seeds 0 1 2] [--epochs 4]
        [--workers 2] [--folder DIR]

The folder is written once (``--folder``, default a temporary folder) from
``D/mnist/t10k-*``.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from neonlite.cli import main as neonlite
from neonlite.config.yaml_io import dump_yaml, parse_yaml
from neonlite.training_log import read_log

from benchmarks.image_folders import mnist_folder

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "image_folder_cnn.yaml"
CROP = [{"type": "pad_crop", "config": {"size": 28, "pad": 2}}]


def run(folder, work, seed, epochs, workers, augment):
    """The validation error after ``epochs`` of one run."""
    desc = parse_yaml(EXAMPLE.read_text(), str(EXAMPLE))
    desc["dataset"]["config"].update(root=str(folder), num_workers=workers, augment=augment)
    name = f"{'crop' if augment else 'none'}_seed{seed}"
    yaml = work / f"{name}.yaml"
    yaml.write_text(dump_yaml(desc))
    status = neonlite(["train", str(yaml), "-q", "-r", str(seed), "-e", str(epochs),
                       "-o", str(work / f"{name}.h5")])
    if status:
        raise SystemExit(f"{name}: neonlite train failed (status {status})")
    return float(read_log(work / f"{name}.h5")["epoch"]["metric"][-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] /
                                                  "shared" / "data"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--folder", help="the PNG folder (written when missing)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnist-augment-"))
    folder = Path(args.folder) if args.folder else work / "digits"
    if not (folder / "train").is_dir():
        mnist_folder(folder, args.data_dir, train=8000, count=10000)
    errors = {"none": [], "crop": []}
    for seed in args.seeds:
        for arm, augment in (("none", None), ("crop", CROP)):
            errors[arm].append(run(folder, work, seed, args.epochs, args.workers, augment))
            print(f"seed {seed} {arm:>4}: validation error {errors[arm][-1]:.4f}", flush=True)
    for arm, values in errors.items():
        print(f"{arm:>4}: mean validation error {np.mean(values):.4f} over seeds "
              f"{args.seeds} ({args.epochs} epochs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
