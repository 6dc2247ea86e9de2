"""HDF5Iterator: minibatches read from an HDF5 file a chunk at a time, for data sets larger
than memory; HDF5Dataset: a train file and a validation file as ``train_iter``/``valid_iter``."""
from pathlib import Path

import h5py
import numpy as np

from ..backends import get_backend
from ..host_memory import available_bytes, describe_bytes
from ..safe_hdf5 import check_self_contained, open_hdf5
from .dataset import SplitDataset
from .locate import find_data_file, root_folders
from .iterator import DataError, set_batch, shard_check


class HDF5Iterator:
    """Iterate (x, t) minibatches of datasets ``x`` (N, ...) and ``y`` of HDF5 file ``file``.

    Same interface as :class:`ArrayIterator` (``shape``, ``target_shape``, ``ndata``,
    ``nbatches``, ``len()``, iteration, ``batches(shuffle)``, ``valid``, ``name``): x is
    batch-first (images NHWC); uint8 x stays uint8 in the file and on the host and is scaled by
    1/255 on the way in; with ``nclass``, y holds one class index per example and the targets
    are int32 class indices (N,) (checked against nclass); without, y is used as it is;
    ``y=None``: x is the target.

    Reading: the file is read in contiguous *chunks* of ``chunk_batches`` batches (one slice
    read each), so at most a chunk and two batches are in host memory.  Shuffling (from the
    backend's seeded RNG) permutes the order of the chunks and the examples within each
    chunk, so reads stay contiguous; two examples can share a batch only if they lie within
    one chunk of each other in the file.  Store the data pre-shuffled when the file's order
    is meaningful (sorted by class, say), or raise ``chunk_batches``.  The last batch of an
    epoch may be partial: it is filled by wrapping around to the first examples of the epoch,
    and ``valid`` tells how many of its rows are real.

    ``file`` is a path (opened read-only until :meth:`close`) or an open ``h5py.File``; either
    way it must read nothing but itself (:func:`neonlite.safe_hdf5.open_hdf5`: a regular
    file, hard links only, no external or virtual datasets), and a chunk of the declared
    example shape must fit in the available memory, both checked before anything is read.

    ``shard(rank, nranks)`` (data-parallel training) batches the epoch's order in global
    batches of ``nranks`` times the backend's batch (chunks of ``chunk_batches`` global
    batches), the same on every process, and keeps this process's rows ``rank * bsz ...``.
    """

    def __init__(self, file, x="x", y="y", nclass=None, shuffle=True, chunk_batches=4,
                 name=None):
        self.be = get_backend()
        self.file, self._owns_file = _open(file)
        self.path = self.file.filename
        self.name = name or Path(self.path).name
        try:
            self._setup(x, y, nclass, shuffle, chunk_batches)
        except BaseException:
            self.close()
            raise

    def _setup(self, x, y, nclass, shuffle, chunk_batches):
        be = self.be
        self.X = self._dataset(x, "x")
        if self.X.ndim < 2 or self.X.shape[0] == 0:
            raise DataError(f"{self.path}: dataset '{x}' must be batch-first (N, ...) with N > "
                            f"0, got shape {self.X.shape}")
        if self.X.dtype.kind not in "uif":
            raise DataError(f"{self.path}: dataset '{x}' must be numeric, got {self.X.dtype}")
        self.ndata, self.shape = self.X.shape[0], tuple(self.X.shape[1:])
        self.Y = None if y is None else self._dataset(y, "y")
        self.nclass, self.shuffle = nclass, shuffle
        if not isinstance(chunk_batches, (int, np.integer)) or chunk_batches < 1:
            raise ValueError(f"HDF5Iterator: chunk_batches must be a positive integer, got "
                             f"{chunk_batches!r}")
        self.chunk_batches = int(chunk_batches)
        self.rank, self.nranks = 0, 1
        self.chunk = self.chunk_batches * be.bsz
        self._check_fits(be.bsz)
        self.target_shape = self.shape if self.Y is None else self._check_targets(y)
        self.nbatches = -(-self.ndata // be.bsz)
        self.x_buf = be.zeros((be.bsz,) + self.shape)
        self.t_buf = self.x_buf if self.Y is None else be.zeros(
            (be.bsz,) + self.target_shape, dtype=np.int32 if nclass is not None else None)
        self._host_buffers(be.bsz)
        self.valid = be.bsz

    def _check_fits(self, rows):
        """DataError before allocating when a chunk of ``rows`` per batch, its shuffled copy
        and the batch buffers (host and device) would take more memory than is available:
        the examples' declared shape, not the file's size, sets what reading costs."""
        example = float(np.prod(self.shape, dtype=np.float64))
        per_row = example * (self.X.dtype.itemsize + np.dtype(self.be.dtype).itemsize)
        need = per_row * (2 * self.chunk_batches * rows + 2 * rows)
        limit = available_bytes()
        if limit is not None and need > limit:
            raise DataError(f"{self.path}: dataset '{self.X.name.lstrip('/')}' declares "
                            f"examples of shape {self.shape} ({self.X.dtype}); reading it in "
                            f"chunks of {self.chunk_batches} batches of {rows} needs "
                            f"{describe_bytes(need)}, more than the {describe_bytes(limit)} of "
                            f"memory available")

    def _host_buffers(self, rows):
        self._hx = np.empty((rows,) + self.shape, dtype=self.X.dtype)
        if self.Y is None:
            self._hy = None
        elif self.nclass is None:
            self._hy = np.empty((rows,) + tuple(self.Y.shape[1:]), dtype=self.Y.dtype)
        else:
            self._hy = np.empty(rows, dtype=np.int64)

    def shard(self, rank, nranks):
        """Iterate only part ``rank`` of ``nranks`` of every global batch (see the class doc)."""
        self.rank, self.nranks = shard_check(self.name, rank, nranks)
        rows = self.be.bsz * self.nranks
        self.chunk = self.chunk_batches * rows
        self._check_fits(rows)
        self.nbatches = -(-self.ndata // rows)
        self._host_buffers(rows)
        return self

    def _dataset(self, key, what):
        obj = self.file.get(key)
        if not isinstance(obj, h5py.Dataset):
            found = []
            self.file.visititems(lambda k, v: found.append(k) if isinstance(v, h5py.Dataset)
                                 else None)
            raise DataError(f"{self.path}: no dataset '{key}' (the {what} of HDF5Iterator, "
                            f"{what}='{key}'); the file has "
                            f"{', '.join(repr(k) for k in found) or 'no datasets'}")
        return obj

    def _check_targets(self, key):
        if self.Y.shape[0] != self.ndata:
            raise DataError(f"{self.path}: '{self.X.name.lstrip('/')}' has {self.ndata} "
                            f"examples but '{key}' has {self.Y.shape[0]}")
        if self.nclass is None:
            return tuple(self.Y.shape[1:])
        if not isinstance(self.nclass, (int, np.integer)) or self.nclass < 2:
            raise DataError(f"{self.name}: nclass must be an int >= 2, got {self.nclass!r}")
        if self.Y.ndim > 2 or self.Y.ndim == 2 and self.Y.shape[1] != 1 \
                or self.Y.dtype.kind not in "uif":
            raise DataError(f"{self.path}: with nclass, '{key}' must hold one class index per "
                            f"example, got shape {self.Y.shape} dtype {self.Y.dtype}")
        for lo in range(0, self.ndata, 1 << 20):
            labels = self._read(self.Y, lo, min(self.ndata, lo + (1 << 20))).reshape(-1)
            bad = np.flatnonzero((labels < 0) | (labels >= self.nclass) | (labels % 1 != 0))
            if bad.size:
                raise DataError(f"{self.path}: '{key}'[{lo + bad[0]}] = {labels[bad[0]]} is "
                                f"not a class index 0 <= label < nclass={self.nclass}")
        return ()

    def _read(self, dset, lo, hi):
        try:
            return dset[lo:hi]
        except (OSError, RuntimeError, ValueError) as err:
            raise DataError(f"{self.path}: cannot read rows {lo}:{hi} of '{dset.name}' (a "
                            f"corrupted file?): {err}") from None

    def _chunks(self, shuffle):
        """(x, y) host arrays of each chunk, in this epoch's order."""
        nchunks = -(-self.ndata // self.chunk)
        for c in (self.be.rng.permutation(nchunks) if shuffle else range(nchunks)):
            lo, hi = c * self.chunk, min(self.ndata, (c + 1) * self.chunk)
            x = self._read(self.X, lo, hi)
            y = None if self.Y is None else self._read(self.Y, lo, hi)
            if self.nclass is not None:
                y = y.reshape(-1).astype(np.int64)
            if shuffle:
                perm = self.be.rng.permutation(hi - lo)
                x, y = x[perm], (None if y is None else y[perm])
            yield x, y

    def __len__(self):
        return self.nbatches

    def __iter__(self):
        return self.batches(self.shuffle)

    def batches(self, shuffle):
        """Generator of (x, t) device buffers for one epoch, shuffled or in order."""
        bsz, hx, hy = self.be.bsz * self.nranks, self._hx, self._hy
        pos, first = 0, None
        for x, y in self._chunks(shuffle):
            i = 0
            while i < len(x):
                take = min(bsz - pos, len(x) - i)
                hx[pos:pos + take] = x[i:i + take]
                if hy is not None:
                    hy[pos:pos + take] = y[i:i + take]
                pos, i = pos + take, i + take
                if pos == bsz:
                    if first is None:
                        first = (hx.copy(), None if hy is None else hy.copy())
                    yield self._emit(bsz)
                    pos = 0
        if pos:
            src = first or (hx[:pos].copy(), None if hy is None else hy[:pos].copy())
            fill = np.arange(bsz - pos) % len(src[0])
            hx[pos:] = src[0][fill]
            if hy is not None:
                hy[pos:] = src[1][fill]
            yield self._emit(pos)

    def _emit(self, valid):
        bsz = self.be.bsz
        first = self.rank * bsz
        self.valid = max(0, min(bsz, valid - first))
        if self._hx.dtype.kind == "f" and not np.isfinite(self._hx[:valid]).all():
            raise DataError(f"{self.path}: dataset '{self.X.name.lstrip('/')}' holds a "
                            f"non-finite value")
        rows = slice(first, first + bsz)
        set_batch(self.x_buf, self.t_buf, self._hx[rows],
                  None if self._hy is None else self._hy[rows])
        return self.x_buf, self.t_buf

    def close(self):
        """Close the file (when this iterator opened it)."""
        if self._owns_file and self.file.id.valid:
            self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _open(file):
    """(h5py.File, whether we opened it) for a path or an open file (checked as a path is:
    every object stored in the file itself)."""
    if isinstance(file, h5py.File):
        check_self_contained(file, file.filename, DataError)
        return file, False
    return open_hdf5(Path(file), DataError, "HDF5 file"), True


class HDF5Dataset(SplitDataset):
    """A training and a validation HDF5 file as neon's ``train_iter`` / ``valid_iter``
    (:class:`HDF5Iterator` s made on first use with the current backend).

    ``train`` and ``valid`` are file names; a relative name is looked for in the working
    folder, then under the data root ``path`` (see :mod:`neonlite.data.locate`; a YAML run
    looks in the YAML file's folder instead of the working folder); not found, the error
    names every place looked.  ``x``, ``y``, ``nclass`` and ``chunk_batches`` are as for
    :class:`HDF5Iterator`.  ``shape`` (one example) is read from the training file's header.
    """

    name = "hdf5"
    #: the options that name files, and the folders (of the data root) they are looked for in
    file_options = {"train": root_folders, "valid": root_folders}

    def __init__(self, train, valid=None, x="x", y="y", nclass=None, chunk_batches=4,
                 path=None, shuffle=True):
        self.files = {"train": self._locate(train, path)}
        if valid is not None:
            self.files["valid"] = self._locate(valid, path)
        self.x, self.y, self.nclass = x, y, nclass
        self.chunk_batches, self.shuffle = chunk_batches, shuffle
        self._iters = {}
        file, _ = _open(self.files["train"])
        with file:
            dset = file.get(x)
            if not isinstance(dset, h5py.Dataset) or dset.ndim < 2:
                raise DataError(f"{self.files['train']}: no batch-first dataset '{x}'")
            self.shape = tuple(dset.shape[1:])

    @staticmethod
    def _locate(name, path):
        return find_data_file(name, [Path.cwd()] + root_folders(path), "HDF5 file")

    def input_paths(self):
        """The training and validation files."""
        return list(self.files.values())

    def _make_iterator(self, which):
        if which not in self.files:
            raise DataError("HDF5Dataset: no validation file was given (valid=...)")
        return HDF5Iterator(str(self.files[which]), self.x, self.y, self.nclass,
                            shuffle=self.shuffle and which == "train",
                            chunk_batches=self.chunk_batches, name=f"hdf5 {which}")
