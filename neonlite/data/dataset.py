"""ImageDataset: the shared shape of MNIST, CIFAR10 and Shapes: host arrays from ``load()``
and neon's ``train_iter`` / ``valid_iter`` built on the current backend."""
from ..backends import get_backend
from .iterator import ArrayIterator


class ImageDataset:
    """Base of the in-memory image data sets.

    A subclass sets ``name``, ``nclass`` and ``shape`` (H, W, C) and implements ``_load()``
    returning ``((X_train, y_train), (X_valid, y_valid))``: X uint8 (N, H, W, C) (NHWC), y int
    (N,) class indices.  ``load()`` caches that.  ``train_iter`` (shuffled each epoch from the
    backend seed) and ``valid_iter`` (in order) are :class:`ArrayIterator` s with one-hot
    targets (N, nclass); they are made on first use with the current backend (and made again
    if the backend changed), keep X as uint8 on the host and scale it by 1/255 on the way in.
    """

    name = "data"
    nclass = None
    shape = None

    def __init__(self, shuffle=True):
        self.shuffle = shuffle
        self._arrays = None
        self._iters = {}

    def _load(self):
        raise NotImplementedError

    def load(self):
        """``((X_train, y_train), (X_valid, y_valid))`` as host numpy arrays (cached)."""
        if self._arrays is None:
            self._arrays = self._load()
        return self._arrays

    def _iterator(self, which):
        be = get_backend()
        cached = self._iters.get(which)
        if cached is None or cached.be is not be:
            (X, y) = self.load()[0 if which == "train" else 1]
            cached = ArrayIterator(X, y, nclass=self.nclass,
                                   shuffle=self.shuffle and which == "train",
                                   name=f"{self.name} {which}")
            self._iters[which] = cached
        return cached

    @property
    def train_iter(self):
        """The training set, an :class:`ArrayIterator` shuffled each epoch."""
        return self._iterator("train")

    @property
    def valid_iter(self):
        """The validation (test) set, an :class:`ArrayIterator` in order."""
        return self._iterator("valid")
