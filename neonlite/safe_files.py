"""Reading input files that cannot make the reader wait or take all memory: regular files only
(a FIFO, device, socket or folder at the path is refused before it is opened for reading),
never more bytes than a stated bound, and files a folder names kept inside that folder.

Every function takes ``error``, the exception class to raise (``DataError``, ``ConfigError``,
``CheckpointError``, ...), so each caller keeps its own error type; messages are one line
naming the file and what was expected.
"""
import os
import stat
import zlib
from pathlib import Path


#: what is at a path, by its mode, for messages (a regular file is none of these)
FILE_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode):
    """The words for what a non-regular file of ``mode`` is (``os.stat``'s or ``os.lstat``'s
    ``st_mode``)."""
    for test, words in FILE_KINDS:
        if test(mode):
            return words
    return "not a regular file"


def regular_stat(path, error, what="file"):
    """``os.stat`` of ``path`` (symlinks followed), which must be a regular file; ``error``
    otherwise (missing: ``FileNotFoundError``'s text).  Nothing is opened."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except OSError as err:
        raise error(f"{path}: cannot read the {what} ({err.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: not a regular file ({file_kind(info.st_mode)}); the {what} must be "
                    f"a plain file")
    return info


def open_regular(path, error, what="file"):
    """A binary file object of regular file ``path``, opened without blocking (O_NONBLOCK:
    a FIFO swapped in after a check does not make the open wait) and checked again on the
    open descriptor (``fstat``), so what is read is the regular file that was checked."""
    regular_stat(path, error, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise error(f"{path}: cannot read the {what} ({err.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{path}: not a regular file ({file_kind(info.st_mode)}); the {what} must be "
                    f"a plain file")
    return os.fdopen(fd, "rb")


def read_bounded(path, limit, error, what="file"):
    """The bytes of regular file ``path``; ``error`` when it holds more than ``limit``
    bytes (checked from its size before reading, and while reading, for a file that grows).
    The memory taken is the file's size (+ what it grows by), never ``limit``."""
    with open_regular(path, error, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise error(f"{path}: the {what} is {size:,} bytes, more than the {limit:,} this "
                        f"reader takes")
        parts = [f.read(size + 1)]  # (a read of n bytes allocates n first: never the limit)
        total = len(parts[0])
        while total <= limit and len(parts[-1]):
            parts.append(f.read(min(1 << 20, limit + 1 - total)))
            total += len(parts[-1])
    parts = [part for part in parts if part]
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(data) > limit:
        raise error(f"{path}: the {what} grew beyond {limit:,} bytes while it was read")
    return data


def gunzip_bounded(compressed, limit, error, where):
    """The bytes gzip stream ``compressed`` (a binary file object positioned at its start)
    inflates to, refusing with ``error`` as soon as they would exceed ``limit``: inflating
    never holds more than ``limit`` + one read's worth of output."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    parts, total = [], 0
    while True:
        chunk = compressed.read(1 << 16)
        if not chunk:
            break
        while chunk:
            try:
                out = inflater.decompress(chunk, limit + 1 - total)
            except zlib.error as err:
                raise error(f"{where}: cannot read the gzip stream ({err})") from None
            parts.append(out)
            total += len(out)
            if total > limit:
                raise error(f"{where}: inflates to more than the {limit:,} bytes its header "
                            f"declares")
            chunk = inflater.unconsumed_tail
            if inflater.eof:
                rest = inflater.unused_data
                if rest.strip(b"\0"):
                    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    chunk = rest
                else:
                    return b"".join(parts)
    if not inflater.eof:
        raise error(f"{where}: cannot read the gzip stream (it ends early: a truncated file?)")
    return b"".join(parts)


def inside_folder(folder, name, error, what="file"):
    """The path of regular file ``name`` (a relative name from the folder's own files: an
    index, a config) inside ``folder``: refused when it is absolute, climbs out with ``..``,
    or resolves (symlinks followed) to anything outside the folder, or is not a regular
    file."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise error(f"{folder}: {what} {name!r} is not a file name")
    given = Path(name)
    if given.is_absolute() or ".." in given.parts:
        raise error(f"{folder}: {what} {name!r} is outside the folder (only files inside "
                    f"{folder} are read)")
    root = Path(folder).resolve()
    path = Path(folder) / given
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        raise error(f"{folder}: {what} {name!r} is missing from {folder}") from None
    except (OSError, RuntimeError) as err:
        raise error(f"{path}: cannot resolve the {what} ({err})") from None
    if root not in resolved.parents:
        raise error(f"{path}: the {what} resolves to {resolved}, outside the folder {root} "
                    f"(only files inside it are read)")
    regular_stat(resolved, error, what)
    return path
