"""A restricted unpickler for data files in pickle form (CIFAR-10's Python batches).

It builds only what pickle opcodes build by themselves (dicts, lists, tuples, bytes, str, ints,
floats, bools, None) plus numpy arrays, dtypes and scalars.  Every other global a pickle names
(``os.system``, ``builtins.eval``, any class) is refused with :class:`UnsafePickleError` before
anything is called, so loading a file never runs code from it.

The numpy globals allowed are exactly those numpy's own pickling emits, under both the
numpy < 2 (``numpy.core``) and numpy >= 2 (``numpy._core``) module names:
``multiarray._reconstruct`` with ``numpy.ndarray`` and ``numpy.dtype`` (protocols 0-4),
``numeric._frombuffer`` (protocol 5) and ``multiarray.scalar`` (numpy scalars).  Python 3
pickles of ``bytes`` at protocol < 3 call ``_codecs.encode(text, "latin1")``; that one call is
allowed, for the latin-1 codec only.  ``complex`` and ``bytearray`` are allowed as numbers and
bytes.  Persistent ids are refused.
"""
import _codecs
import builtins
import io
import pickle

import numpy as np

from ..safe_files import open_regular
from .iterator import DataError


class UnsafePickleError(DataError):
    """A pickle names a global that the restricted unpickler does not build."""


class _Latin1Encode:
    """``_codecs.encode`` limited to latin-1 (how protocol < 3 pickles store bytes).  An
    instance without ``__dict__`` or slots, so a pickle's BUILD opcode cannot alter it."""

    __slots__ = ()

    def __call__(self, text, encoding="utf-8"):
        if encoding not in ("latin1", "latin-1", "iso-8859-1"):
            raise UnsafePickleError(f"_codecs.encode with encoding {encoding!r} is not allowed "
                                    f"(only latin1, which pickles of bytes use)")
        if not isinstance(text, str):
            raise UnsafePickleError(f"_codecs.encode of a {type(text).__name__} is not allowed")
        return _codecs.encode(text, "latin1")


def _allowed_globals():
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric
    allowed = {("_codecs", "encode"): _Latin1Encode(),
               ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for module in ("builtins", "__builtin__"):
        allowed[(module, "complex")] = builtins.complex
        allowed[(module, "bytearray")] = builtins.bytearray
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


_ALLOWED = _allowed_globals()


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only the globals listed in the module docstring."""

    def __init__(self, file, source="<pickle>", encoding="bytes"):
        super().__init__(file, encoding=encoding)
        self.source = source

    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"{self.source}: refusing to load: the pickle names the global '{module}.{name}'"
                f", which could run code; only dicts, lists, tuples, bytes, str, numbers and "
                f"numpy arrays are allowed") from None

    def persistent_load(self, pid):
        raise UnsafePickleError(f"{self.source}: refusing to load: the pickle uses a persistent "
                                f"id ({pid!r}); only plain data is allowed")


def safe_load(path, encoding="bytes"):
    """The object pickled in file ``path``, built by :class:`RestrictedUnpickler`.

    ``encoding`` decodes Python 2 ``str`` (``"bytes"`` keeps them as bytes, as CIFAR-10's
    published batches expect).  A refused global raises :class:`UnsafePickleError`; a
    truncated or malformed file raises :class:`DataError`; both name the file.
    """
    with open_regular(path, DataError, "pickle file") as f:
        return _load(f, str(path), encoding)


def safe_loads(data, encoding="bytes", source="<bytes>"):
    """Like :func:`safe_load`, for a pickle held in ``data`` (bytes)."""
    return _load(io.BytesIO(data), source, encoding)


def _load(f, source, encoding):
    try:
        return RestrictedUnpickler(f, source, encoding).load()
    except UnsafePickleError:
        raise
    except EOFError:
        raise DataError(f"{source}: the pickle is truncated (ended before its STOP "
                        f"opcode)") from None
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, MemoryError) as err:
        raise DataError(f"{source}: not a readable data pickle ({type(err).__name__}: "
                        f"{err})") from None
