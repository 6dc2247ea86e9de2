"""Reading and writing IDX files (the MNIST format), gzipped or not."""
import gzip
import math
import zlib
from contextlib import nullcontext

import numpy as np

from ..atomic import atomic_write
from .iterator import DataError

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
           0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09}


def _open(path):
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def read_idx(path):
    """The array stored in IDX file ``path``; checks the magic number and that the data size
    matches the header, and raises :class:`DataError` naming the file otherwise."""
    try:
        with _open(path) as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(f"{path}: cannot read IDX file ({err})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataError(f"{path}: not an IDX file (bad magic number {raw[:4].hex() or 'empty'}; "
                        f"expected 0000 followed by a type code and the number of dimensions)")
    dtype, ndim = np.dtype(_DTYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: IDX header truncated ({len(raw)} bytes, expected {header})")
    dims = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    expected = header + math.prod(dims) * dtype.itemsize
    if len(raw) != expected:
        raise DataError(f"{path}: IDX size mismatch: the header promises {dims} "
                        f"({expected} bytes) but the file has {len(raw)} bytes")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(
        dtype.newbyteorder("="))


def write_idx(path, array, compress=None):
    """Write uint8/int8 ``array`` to IDX file ``path`` (gzipped when ``compress`` or the name
    ends in .gz), via a temporary name renamed into place."""
    array = np.ascontiguousarray(array)
    if array.dtype not in _CODES:
        raise ValueError(f"write_idx supports uint8 and int8 arrays, got {array.dtype}")
    header = bytes([0, 0, _CODES[array.dtype], array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    compress = path.endswith(".gz") if compress is None else compress
    with atomic_write(path) as out:
        with (gzip.GzipFile(fileobj=out, mode="wb") if compress else nullcontext(out)) as f:
            f.write(header + array.tobytes())
