"""CIFAR-10: 32x32 colour images in 10 classes, from the published binary or Python-pickle
batches in ``<data root>/cifar10/``."""
import numpy as np

from ..safe_files import read_bounded
from .dataset import ImageDataset
from .datadir import dataset_dir
from .iterator import DataError
from .safe_pickle import safe_load

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck")
TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST = "test_batch"
RECORD = 1 + 3 * 32 * 32
URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


class CIFAR10(ImageDataset):
    """CIFAR-10 from ``<path>/cifar10/`` (``path``: the data root, see
    :func:`resolve_data_dir`).

    Two layouts are read, each either directly in ``cifar10/`` or in the folder its archive
    unpacks to:

    - binary (``cifar-10-batches-bin/``): ``data_batch_1.bin`` .. ``data_batch_5.bin`` and
      ``test_batch.bin``, records of 1 label byte + 3072 pixel bytes (channel-major: 1024 red,
      1024 green, 1024 blue, each 32x32 row-major);
    - Python batches (``cifar-10-batches-py/``): ``data_batch_1`` .. ``data_batch_5`` and
      ``test_batch``, pickled dicts with ``data`` (N, 3072) uint8 in the same order and
      ``labels``; read with the restricted unpickler (:mod:`.safe_pickle`), never plain pickle.

    X: uint8 (N, 32, 32, 3) NHWC (kept on the host, scaled by 1/255 on the way in); y: class
    indices 0-9 (one-hot (N, 10) in the iterators).  ``valid_iter`` is the test batch.
    """

    name = "cifar10"
    nclass = 10
    image_shape = (32, 32, 3)

    def __init__(self, path=None, shuffle=True, augment=None):
        super().__init__(shuffle, augment=augment)
        self.folder = dataset_dir("cifar10", path)

    def _layout(self):
        """(reader, [train paths], test path) of the first complete layout found."""
        looked, partial = [], None
        for sub in ("", "cifar-10-batches-bin", "cifar-10-batches-py"):
            folder = self.folder / sub if sub else self.folder
            for suffix, reader in ((".bin", _read_binary), ("", _read_pickled)):
                paths = [folder / f"{n}{suffix}" for n in TRAIN + (TEST,)]
                present = [p.is_file() for p in paths]
                if all(present):
                    return reader, paths[:-1], paths[-1]
                if any(present) and partial is None:
                    partial = [p.name for p, ok in zip(paths, present) if not ok], folder
            looked.append(str(folder))
        if partial is not None:
            raise DataError(f"CIFAR10: {partial[1]} lacks {', '.join(partial[0])} (expected "
                            f"{TRAIN[0]}..{TRAIN[-1]} and {TEST}, all in one format)")
        raise DataError(f"CIFAR10: no batches found: looked for {', '.join(TRAIN)}, {TEST} "
                        f"(binary: with .bin; Python batches: without) in {', '.join(looked)}. "
                        f"Download cifar-10-binary.tar.gz or cifar-10-python.tar.gz from {URL} "
                        f"and unpack it in {self.folder}/ (the 'cifar10' folder of the data "
                        f"directory: --data-dir, $NEONLITE_DATA or ~/.neonlite/data)")

    def _load(self):
        reader, train_paths, test_path = self._layout()
        parts = [reader(p) for p in train_paths]
        train = (np.concatenate([X for X, _ in parts]), np.concatenate([y for _, y in parts]))
        return train, reader(test_path)


def _to_nhwc(flat):
    """(N, 3072) channel-major rows -> uint8 (N, 32, 32, 3)."""
    return np.ascontiguousarray(flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def _check_labels(labels, path):
    bad = np.flatnonzero((labels < 0) | (labels >= len(CLASSES)))
    if bad.size:
        raise DataError(f"{path}: label {labels[bad[0]]} of record {bad[0]} is not a class "
                        f"index 0-9")
    return labels.astype(np.int64)


#: the largest CIFAR-10 batch file read (the published ones are 30 MB each)
MAX_BATCH_BYTES = 1 << 30


def _read_binary(path):
    raw = np.frombuffer(read_bounded(path, MAX_BATCH_BYTES, DataError, "CIFAR-10 batch file"),
                        dtype=np.uint8)
    if raw.size == 0 or raw.size % RECORD:
        raise DataError(f"{path}: {raw.size} bytes is not a whole, non-zero number of "
                        f"{RECORD}-byte records (1 label byte + 3072 pixel bytes each)")
    records = raw.reshape(-1, RECORD)
    return _to_nhwc(records[:, 1:]), _check_labels(records[:, 0], path)


def _read_pickled(path):
    batch = safe_load(path)
    if not isinstance(batch, dict):
        raise DataError(f"{path}: expected a pickled dict with 'data' and 'labels', got a "
                        f"{type(batch).__name__}")
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    missing = [k for k in ("data", "labels") if k not in batch]
    if missing:
        raise DataError(f"{path}: the batch has no {' or '.join(map(repr, missing))} entry "
                        f"(keys: {sorted(map(str, batch))})")
    data = batch["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != RECORD - 1:
        raise DataError(f"{path}: 'data' must be a uint8 array of shape (N, 3072), got "
                        f"{getattr(data, 'dtype', type(data).__name__)} "
                        f"{getattr(data, 'shape', '')}")
    try:
        labels = np.asarray(batch["labels"], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise DataError(f"{path}: 'labels' must be a list of class indices") from None
    if labels.shape[0] != data.shape[0]:
        raise DataError(f"{path}: {data.shape[0]} images but {labels.shape[0]} labels")
    return _to_nhwc(data), _check_labels(labels, path)
