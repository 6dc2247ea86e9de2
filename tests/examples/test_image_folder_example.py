"""examples/image_folder_cnn.yaml on a folder of real MNIST digits written as PNG files: it
trains with pad-2 crops and two loader workers, learns (validation error well below chance),
saves the digit names in its checkpoint, and ``neonlite predict`` names the digits of PNG
files; no loader worker is left behind."""
import subprocess
import sys

from support.harness import CHECKOUT, data_dir
from support.loader_workers import orphan_workers
from support.requires import requires

from benchmarks.image_folders import mnist_folder
from neonlite.serialize import read_checkpoint
from neonlite.training_log import read_log

EXAMPLE = CHECKOUT / "examples" / "image_folder_cnn.yaml"


def neonlite(*args, cwd):
    return subprocess.run([sys.executable, "-m", "neonlite.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


@requires("mnist")
def test_the_image_folder_example_learns_real_digits_and_names_them(tmp_path):
    mnist_folder(tmp_path / "digits", data_dir(), train=2000, count=2500)
    done = neonlite("train", EXAMPLE, "--data-dir", tmp_path, "-e", "2", "--save-path",
                    tmp_path / "cnn.h5", "-o", tmp_path / "log.h5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    log = read_log(tmp_path / "log.h5")
    assert log["epoch"]["metric"][-1] < 0.25, log["epoch"]["metric"]
    ckpt = read_checkpoint(tmp_path / "cnn.h5")
    assert ckpt.classes == tuple(str(d) for d in range(10))
    assert ckpt.in_shape == (28, 28, 1)
    sevens = sorted((tmp_path / "digits" / "valid" / "7").glob("*.png"))[:20]
    done = neonlite("predict", tmp_path / "cnn.h5", *sevens, "--top", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 20 and all(line.startswith(str(p)) for line, p in zip(lines, sevens))
    named = [line.split("\t")[1].split()[0] for line in lines]
    assert named.count("7") >= 15, lines
    assert orphan_workers() == []
