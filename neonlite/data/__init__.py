"""Data sets and iterators (batch-first, images NHWC, uint8 on the host, on the current
backend)."""
from .cifar10 import CIFAR10
from .datadir import dataset_dir, resolve_data_dir
from .download import ChecksumError, ChecksumWarning, DownloadError
from .hdf5_iterator import HDF5Dataset, HDF5Iterator
from .image_folder import ImageFolder
from .iterator import ArrayIterator, DataError
from .mnist import MNIST
from .safe_pickle import UnsafePickleError, safe_load
from .sequences import SequenceIterator
from .shapes import Shapes
from .text import TextCorpus, TextWindows, Vocabulary

__all__ = ["ArrayIterator", "DataError", "SequenceIterator", "TextCorpus", "TextWindows",
           "Vocabulary", "MNIST", "CIFAR10", "Shapes", "HDF5Iterator", "HDF5Dataset",
           "ImageFolder", "resolve_data_dir",
           "dataset_dir", "DownloadError", "ChecksumError", "ChecksumWarning",
           "UnsafePickleError", "safe_load"]
