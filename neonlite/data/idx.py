"""Reading and writing IDX files (the MNIST format), gzipped or not."""
import gzip
import math
import os
import zlib
from contextlib import nullcontext

import numpy as np

from ..atomic import atomic_write
from ..host_memory import available_bytes
from ..safe_files import gunzip_bounded, open_regular
from .iterator import DataError

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
           0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09}
_MAX_HEADER = 4 + 4 * 255


def _read(path):
    """The bytes IDX file ``path`` holds (gunzipped), never more than its header declares:
    a gzip stream is inflated with the bound its header (read from the first bytes it
    inflates to) declares, so a small file that inflates to gigabytes is refused after
    inflating at most that bound."""
    with open_regular(path, DataError, "IDX file") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        if not gzipped:
            limit = _declared_size(f.read(_MAX_HEADER))
            f.seek(0)
            return f.read(min(limit, os.fstat(f.fileno()).st_size) + 1)
        head = gzip.GzipFile(fileobj=f, mode="rb").read(_MAX_HEADER)
        f.seek(0)
        limit = _declared_size(head)
        available = available_bytes()
        if available is not None and limit > available:
            raise DataError(f"{path}: the IDX header declares {limit:,} bytes, more than the "
                            f"{available:,} bytes of memory available")
        return gunzip_bounded(f, limit, DataError, str(path))


def _declared_size(head):
    """The file size (header + data) the IDX header at the start of ``head`` declares; a
    header too short or with a bad magic number gives len(head), so the checks of
    :func:`read_idx` report it."""
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _DTYPES or \
            len(head) < 4 + 4 * head[3]:
        return len(head)
    dims = [int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(head[3])]
    return 4 + 4 * head[3] + math.prod(dims) * np.dtype(_DTYPES[head[2]]).itemsize


def read_idx(path):
    """The array stored in IDX file ``path`` (a regular file; gzipped or not); checks the
    magic number and that the data size matches the header, and raises :class:`DataError`
    naming the file otherwise.  Never reads or inflates more than the header declares."""
    try:
        raw = _read(path)
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
