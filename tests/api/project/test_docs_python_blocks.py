"""The Python blocks of README.md and docs/ marked ``<!-- test: NAME -->`` run as printed, each
in a fresh interpreter in an empty folder (the README's quick start; docs/data.md's loaders on
the shared MNIST test files)."""
import os
import re
import subprocess
import sys

import pytest

from support.harness import CHECKOUT, data_dir
from support.requires import requires

ROOT = CHECKOUT


def python_block(path, name):
    """The ```python block right after ``<!-- test: name -->`` in ``path``."""
    found = re.search(r"^<!-- test: " + re.escape(name) + r" -->\n```python\n(.*?)^```$",
                      path.read_text(encoding="utf-8"), re.M | re.S)
    assert found, f"{path.name} has no ```python block after <!-- test: {name} -->"
    return found.group(1)


def run_block(code, cwd, **env):
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                            text=True, timeout=900, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_readme_python_quick_start_runs_as_printed(tmp_path):
    out = run_block(python_block(ROOT / "README.md", "python-quick-start"), tmp_path,
                    NEONLITE_DATA=str(tmp_path / "no-data"))
    assert float(out.splitlines()[0]) < 0.9  # misclassification, better than chance
    assert (tmp_path / "lenet.h5").is_file()


@requires("mnist")
def test_the_data_docs_loaders_run_as_printed_on_the_mnist_test_files(tmp_path):
    out = run_block(python_block(ROOT / "docs" / "data.md", "data-loaders"), tmp_path,
                    NEONLITE_DATA=str(data_dir()))
    assert out.strip() == "80 training batches, 2000 validation images"


def test_the_data_docs_image_folder_block_runs_as_printed(tmp_path):
    out = run_block(python_block(ROOT / "docs" / "data.md", "image-folder"), tmp_path)
    assert out.startswith("3 batches of (4, 12, 12, 3) labels [")


def test_the_data_docs_augmentation_block_runs_as_printed(tmp_path):
    out = run_block(python_block(ROOT / "docs" / "data.md", "augment"), tmp_path)
    assert out.strip() == "(32, 32, 3) (64, 32, 32, 3) 1.3"
