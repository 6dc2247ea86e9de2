"""Data iterators (batch-first, on the current backend)."""
from .iterator import ArrayIterator, DataError
from .text import TextCorpus, TextWindows, Vocabulary

__all__ = ["ArrayIterator", "DataError", "TextCorpus", "TextWindows", "Vocabulary"]
