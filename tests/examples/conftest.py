"""The data roots the example tests train on, shared by the files of ``tests/examples/``:
``mnist_dir`` (the real MNIST test set split 8,000 / 2,000 into IDX training and test files)
and ``cifar_dir`` (a tiny CIFAR-10 of 8 random images per batch file, in the published binary
format)."""
import numpy as np
import pytest
from support.harness import data_dir
from support.requires import need

from neonlite.data.idx import read_idx, write_idx

MNIST = data_dir() / "mnist"
MNIST_FILES = (MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz")


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """A data root whose mnist/ holds IDX files made from the real 10,000 test images:
    8,000 as the training files, 2,000 as the test files."""
    need("mnist")
    X, y = read_idx(str(MNIST_FILES[0])), read_idx(str(MNIST_FILES[1]))
    root = tmp_path_factory.mktemp("data")
    folder = root / "mnist"
    folder.mkdir()
    for name, array in (("train-images-idx3-ubyte", X[:8000]),
                        ("train-labels-idx1-ubyte", y[:8000]),
                        ("t10k-images-idx3-ubyte", X[8000:]),
                        ("t10k-labels-idx1-ubyte", y[8000:])):
        write_idx(str(folder / name), array)
    return root


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    """A data root whose cifar10/ holds a tiny CIFAR-10 in the published binary format."""
    root = tmp_path_factory.mktemp("data")
    folder = root / "cifar10" / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        labels = rng.integers(0, 10, (8, 1), dtype=np.uint8)
        pixels = rng.integers(0, 256, (8, 3072), dtype=np.uint8)
        (folder / name).write_bytes(np.concatenate([labels, pixels], axis=1).tobytes())
    return root
