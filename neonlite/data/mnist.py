"""MNIST: 28x28 grey handwritten digits, read from the four IDX files (gzipped or not) in
``<data root>/mnist/``, downloaded there when missing and the network is reachable."""
import logging
import warnings

import numpy as np

from .dataset import ImageDataset
from .datadir import dataset_dir
from .download import ChecksumWarning, DownloadError, md5_file
from .download import download as download_file
from .idx import read_idx
from .iterator import DataError

MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
log = logging.getLogger(__name__)

# role -> (file name without .gz, md5 of the published gzipped file)
FILES = {
    "train_images": ("train-images-idx3-ubyte", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "train_labels": ("train-labels-idx1-ubyte", "d53e105ee54ea40749a09fcbcd1e9432"),
    "test_images": ("t10k-images-idx3-ubyte", "9fb629c4189551a2d022fa330f9573f3"),
    "test_labels": ("t10k-labels-idx1-ubyte", "ec29112dd5afa0611ce80d1b7f02629c"),
}


class MNIST(ImageDataset):
    """MNIST from ``<path>/mnist/`` (``path``: the data root, see :func:`resolve_data_dir`).

    X: uint8 (N, 28, 28, 1) (NHWC, kept on the host, scaled by 1/255 on the way in);
    y: class indices 0-9, one-hot (N, 10) in the iterators.  ``train_iter`` holds the train
    files, ``valid_iter`` the t10k (test) files.

    Each file may be ``NAME`` or ``NAME.gz``.  Headers (magic number, dimensions, sizes) are
    checked and images and labels must agree in count.  A ``.gz`` file whose md5 differs from
    the published one gives a :class:`ChecksumWarning` and is used (your own data in MNIST's
    format); uncompressed files are not checksummed (the published sums are of the gzips).
    Missing files are downloaded from ``mirror`` when ``download`` is true (md5-verified,
    written to a temporary name and renamed); if that fails, :class:`DataError` names the files
    looked for and the folder to put them in.  Files are read on the first ``load()`` or
    iterator use.

    ``test_split`` (a fraction in (0, 1), default None): use only the two t10k (test) files,
    the folder many people have at hand: their last ``test_split`` validates and the rest
    trains (``test_split=0.2``: 8,000 training and 2,000 validation images, in file order);
    the train files are then neither needed nor downloaded.
    """

    name = "mnist"
    nclass = 10
    image_shape = (28, 28, 1)

    def __init__(self, path=None, download=True, mirror=MIRROR, timeout=30.0, shuffle=True,
                 reconstruct=False, test_split=None, augment=None):
        super().__init__(shuffle, reconstruct, augment)
        if test_split is not None and (isinstance(test_split, bool) or
                                       not isinstance(test_split, (int, float)) or
                                       not 0.0 < test_split < 1.0):
            raise ValueError(f"MNIST: test_split must be a fraction in (0, 1) (the part of the "
                             f"t10k files that validates) or None, got {test_split!r}")
        self.test_split = test_split
        self.roles = [r for r in FILES if test_split is None or r.startswith("test_")]
        self.folder = dataset_dir("mnist", path)
        self.download = download
        self.mirror = mirror if mirror.endswith("/") else mirror + "/"
        self.timeout = timeout

    def _find(self, folder):
        """role -> existing path (the .gz preferred) or None."""
        found = {}
        for role in self.roles:
            fname = FILES[role][0]
            candidates = [folder / f"{fname}.gz", folder / fname]
            found[role] = next((p for p in candidates if p.is_file()), None)
        return found

    def _fetch_missing(self, found):
        missing = [role for role, p in found.items() if p is None]
        if not missing:
            return found, set()
        names = ", ".join(FILES[r][0] for r in missing)
        put = (f"put the IDX files ({', '.join(FILES[r][0] for r in self.roles)}; each may "
               f"be gzipped as NAME.gz) in {self.folder}/ (the 'mnist' folder of the data "
               f"directory: --data-dir, $NEONLITE_DATA or ~/.neonlite/data)")
        if any(self._find(self.folder.parent).values()):
            put += f"; some are in {self.folder.parent}/: move them into {self.folder}/"
        if self.test_split is None and all(found[r] for r in FILES if r.startswith("test_")):
            put += ("; or train on a split of the t10k files that are there: test_split=0.2 "
                    "(YAML: dataset: {type: mnist, config: {test_split: 0.2}})")
        if not self.download:
            raise DataError(f"MNIST: {self.folder} lacks {names} (looked for NAME and "
                            f"NAME.gz); downloading is off; {put}")
        fresh = set()
        for role in missing:
            fname, md5 = FILES[role]
            log.info("MNIST: downloading %s%s.gz to %s", self.mirror, fname, self.folder)
            try:
                found[role] = download_file(self.mirror + fname + ".gz",
                                            self.folder / f"{fname}.gz", md5=md5,
                                            timeout=self.timeout)
            except DownloadError as err:
                raise DataError(f"MNIST: {self.folder} lacks {names} (looked for NAME and "
                                f"NAME.gz) and downloading failed ({err}); {put}") from None
            fresh.add(role)
        return found, fresh

    def _load(self):
        found, fresh = self._fetch_missing(self._find(self.folder))
        for role, path in found.items():
            if role not in fresh and path.suffix == ".gz":
                digest = md5_file(path)
                if digest != FILES[role][1]:
                    warnings.warn(f"{path}: md5 {digest} differs from the published MNIST "
                                  f"file's {FILES[role][1]}; using it as data in MNIST's "
                                  f"format", ChecksumWarning, stacklevel=3)
        arrays = {role: read_idx(str(path)) for role, path in found.items()}
        if self.test_split is None:
            return (self._split(arrays, found, "train"), self._split(arrays, found, "test"))
        X, y = self._split(arrays, found, "test")
        cut = len(X) - int(round(len(X) * self.test_split))
        if not 0 < cut < len(X):
            raise DataError(f"MNIST: test_split={self.test_split} of the {len(X)} t10k images "
                            f"leaves no training or no validation image")
        return (X[:cut], y[:cut]), (X[cut:], y[cut:])

    def _split(self, arrays, found, part):
        X, y = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        xpath, ypath = found[f"{part}_images"], found[f"{part}_labels"]
        if X.ndim != 3 or X.shape[1:] != self.image_shape[:2] or X.dtype != np.uint8:
            raise DataError(f"{xpath}: expected uint8 images of shape (N, 28, 28), got "
                            f"{X.dtype} {X.shape}")
        if y.ndim != 1 or y.dtype != np.uint8:
            raise DataError(f"{ypath}: expected uint8 labels of shape (N,), got {y.dtype} "
                            f"{y.shape}")
        if X.shape[0] != y.shape[0]:
            raise DataError(f"MNIST: {xpath.name} holds {X.shape[0]} images but {ypath.name} "
                            f"holds {y.shape[0]} labels (in {xpath.parent})")
        bad = np.flatnonzero(y >= self.nclass)
        if bad.size:
            raise DataError(f"{ypath}: label {y[bad[0]]} at index {bad[0]} is not a digit "
                            f"0-9")
        return X[..., None], y.astype(np.int64)
