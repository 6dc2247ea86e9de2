"""Downloading a data file: to a temporary name in the target folder, checked against its md5,
then renamed into place, so an interrupted or corrupted download never leaves a file behind."""
import hashlib
import http.client
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..atomic import atomic_write
from .iterator import DataError

SCHEMES = ("http://", "https://", "file://")


class DownloadError(DataError):
    """The file could not be fetched (network unreachable, timeout, HTTP error); the message
    names the URL and where to put the file by hand."""


class ChecksumError(DataError):
    """A downloaded file's md5 differs from the expected one (the file was removed)."""


class ChecksumWarning(UserWarning):
    """A local data file differs from the published one (it is still used)."""


def md5_file(path, chunk_size=1 << 20):
    """Hex md5 digest of the file at ``path``."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk_size), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url, dest, md5=None, timeout=30.0, max_seconds=900.0, chunk_size=1 << 16):
    """Fetch ``url`` to the file ``dest`` and return ``dest`` as a Path.

    The bytes go to a temporary file next to ``dest``; when ``md5`` is given the file's digest
    must equal it.  Only a complete, verified file is renamed to ``dest``; on any failure the
    temporary file is removed and ``dest`` is untouched.

    ``timeout`` bounds the connection and every read (seconds); ``max_seconds`` bounds the
    whole transfer.  Raises :class:`DownloadError` (network, HTTP status, timeout, short
    transfer) or :class:`ChecksumError` (md5 mismatch).
    """
    dest = Path(dest)
    if not str(url).startswith(SCHEMES):
        raise ValueError(f"download: url must start with one of {', '.join(SCHEMES)}; got "
                         f"{url!r}")
    with atomic_write(dest) as out:
        digest = _fetch(url, out, timeout, max_seconds, chunk_size, dest)
        if md5 is not None and digest != md5.lower():
            raise ChecksumError(f"{url}: the downloaded file has md5 {digest} but {md5} was "
                                f"expected; it was discarded and {dest} was not written (a "
                                f"corrupted transfer or a wrong mirror)")
    return dest


def _fetch(url, out, timeout, max_seconds, chunk_size, dest):
    """Stream ``url`` into the open file ``out``; return the md5 of what was written."""
    digest = hashlib.md5()
    start, received = time.monotonic(), 0
    where = f"download it another way and put it at {dest}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            while True:
                block = response.read(chunk_size)
                if not block:
                    break
                out.write(block)
                digest.update(block)
                received += len(block)
                if time.monotonic() - start > max_seconds:
                    raise DownloadError(f"cannot download {url}: not finished after "
                                        f"{max_seconds:g} s ({received} bytes so far); {where}")
    except urllib.error.HTTPError as err:
        raise DownloadError(f"cannot download {url}: HTTP {err.code} {err.reason}; "
                            f"{where}") from None
    except urllib.error.URLError as err:
        raise DownloadError(f"cannot download {url}: {_reason(err.reason, timeout)} (is the "
                            f"network reachable?); {where}") from None
    except http.client.IncompleteRead as err:
        raise DownloadError(f"cannot download {url}: the transfer stopped after "
                            f"{received + len(err.partial)} bytes; {where}") from None
    except (OSError, http.client.HTTPException) as err:
        raise DownloadError(f"cannot download {url}: {_reason(err, timeout)}; {where}") from None
    if length is not None and length.isdigit() and int(length) != received:
        raise DownloadError(f"cannot download {url}: received {received} of {length} bytes; "
                            f"{where}")
    return digest.hexdigest()


def _reason(err, timeout):
    if isinstance(err, TimeoutError):
        return f"no answer within {timeout:g} s"
    return str(err) or type(err).__name__
