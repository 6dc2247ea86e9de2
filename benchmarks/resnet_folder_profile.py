"""Training never waits for its images: ``neonlite profile`` of the CIFAR-10 ResNet-20 recipe
(``examples/cifar10_resnet.yaml``, its pad-4 crop + flip + normalise) fed from a folder of
random 32x32 PNG files by loader workers; prints the profile table, whose ``data wait`` row is
the time a step waited for its batch.

    python -m benchmarks.resnet_folder_profile [--workers 2] [--count 5000] [--steps 10]
        [--warmup 5] [-b cpu|gpu] [-z BATCH]
"""
import argparse
import sys
import tempfile
from pathlib import Path

from neonlite.cli import main as neonlite
from neonlite.config.yaml_io import dump_yaml, parse_yaml

from benchmarks.image_folders import random_folder

RECIPE = Path(__file__).resolve().parents[1] / "examples" / "cifar10_resnet.yaml"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("-b", "--backend", default="cpu")
    parser.add_argument("-z", "--batch-size", type=int, default=128)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="resnet-folder-"))
    random_folder(work / "pngs", 32, args.count)
    desc = parse_yaml(RECIPE.read_text(), str(RECIPE))
    augment = desc["dataset"]["config"]["augment"]
    desc["dataset"] = {"type": "image_folder", "config": {
        "root": str(work / "pngs"), "augment": augment, "num_workers": args.workers}}
    run = work / "resnet20_folder.yaml"
    run.write_text(dump_yaml(desc))
    return neonlite(["profile", str(run), "-b", args.backend, "-z", str(args.batch_size),
                     "--steps", str(args.steps), "--warmup", str(args.warmup)])


if __name__ == "__main__":
    sys.exit(main())
