"""Data sets with neon's ``train_iter`` / ``valid_iter``: :class:`SplitDataset` (the iterator
cache every data set shares) and :class:`ImageDataset` (MNIST, CIFAR10, Shapes: host arrays
from ``load()``)."""
from ..backends import get_backend
from .augment.from_config import pipeline_from_config
from .iterator import ArrayIterator


class SplitDataset:
    """``train_iter`` and ``valid_iter``, each made by ``_make_iterator(which)`` ("train" or
    "valid") on first use with the current backend, and made again if the backend changed.
    A subclass sets ``self._iters = {}`` in its constructor."""

    def _iterator(self, which):
        cached = self._iters.get(which)
        if cached is None or cached.be is not get_backend():
            cached = self._iters[which] = self._make_iterator(which)
        return cached

    def _make_iterator(self, which):
        raise NotImplementedError

    def input_paths(self):
        """The files and folders this data set reads (no output of a run may replace them:
        :mod:`neonlite.output_paths`)."""
        folder = getattr(self, "folder", None)
        return [folder] if folder is not None else []

    @property
    def train_iter(self):
        """The training set, shuffled each epoch (when ``shuffle``)."""
        return self._iterator("train")

    @property
    def valid_iter(self):
        """The validation (test) set, in order."""
        return self._iterator("valid")


class ImageDataset(SplitDataset):
    """Base of the in-memory image data sets.

    A subclass sets ``name``, ``nclass`` and ``image_shape`` (H, W, C) and implements
    ``_load()``
    returning ``((X_train, y_train), (X_valid, y_valid))``: X uint8 (N, H, W, C) (NHWC), y int
    (N,) class indices.  ``load()`` caches that.  ``train_iter`` (shuffled each epoch from the
    backend seed) and ``valid_iter`` (in order) are :class:`ArrayIterator` s with one-hot
    targets (N, nclass); they are made on first use with the current backend (and made again
    if the backend changed), keep X as uint8 on the host and scale it by 1/255 on the way in.
    ``reconstruct=True``: the targets are the images themselves (autoencoders).
    ``augment``: the training set's augmentation (a YAML list or a
    :class:`~neonlite.data.augment.Pipeline`); the validation set takes its deterministic
    form (:meth:`~neonlite.data.augment.Pipeline.evaluation`).  ``shape`` is the shape the
    network sees: ``image_shape`` after the augmentation.
    """

    name = "data"
    nclass = None
    image_shape = None

    def __init__(self, shuffle=True, reconstruct=False, augment=None):
        self.shuffle = shuffle
        self.reconstruct = bool(reconstruct)
        self.augment = None if augment is None else pipeline_from_config(augment)
        self._arrays = None
        self._iters = {}

    @property
    def shape(self):
        """(h, w, c) of one example as the network sees it (after the augmentation)."""
        if self.augment is None or self.image_shape is None:
            return self.image_shape
        return self.augment.out_shape(self.image_shape)

    def _load(self):
        raise NotImplementedError

    def load(self):
        """``((X_train, y_train), (X_valid, y_valid))`` as host numpy arrays (cached)."""
        if self._arrays is None:
            self._arrays = self._load()
        return self._arrays

    def _make_iterator(self, which):
        (X, y) = self.load()[0 if which == "train" else 1]
        augment = self.augment if self.augment is None or which == "train" else \
            self.augment.evaluation()
        if self.reconstruct:
            return ArrayIterator(X, None, shuffle=self.shuffle and which == "train",
                                 name=f"{self.name} {which}", augment=augment)
        return ArrayIterator(X, y, nclass=self.nclass, shuffle=self.shuffle and which == "train",
                             name=f"{self.name} {which}", augment=augment)
