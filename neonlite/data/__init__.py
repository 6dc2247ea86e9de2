"""Data iterators (batch-first, on the current backend)."""
from .iterator import ArrayIterator, DataError

__all__ = ["ArrayIterator", "DataError"]
