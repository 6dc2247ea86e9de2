"""The on-disk kernel cache: cache keys, and entries written atomically with a checksum.

Directory: ``NEONLITE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/neonlite/kernels``, else
``~/.cache/neonlite/kernels``.

An entry is one file, ``<variant>-<key prefix><suffix>``, laid out as::

    payload (a shared object or a cubin) | metadata (UTF-8 JSON) | trailer (56 bytes)
    trailer = b"NLKCACH1" | payload length (u64 LE) | metadata length (u64 LE)
              | sha256(payload + metadata)

A shared object with bytes after its end still loads (the loader maps only its segments), so a
CPU entry is handed to the import machinery as it is.  An entry is written under a temporary
name in the same folder and renamed into place (:func:`neonlite.atomic.atomic_write`), so
readers see the old entry or the new one, never half of one; a file whose trailer or checksum
does not match (truncated, overwritten) reads as corrupt and is rebuilt.  Two processes building
the same entry at once both finish with a good kernel: each writes its own temporary file and
the last rename wins.

Whose files are loaded.  An entry is code that runs as the user who loads it, so the cache
takes only what the user could have written alone:

* the folder must not be writable by other users (group or others), unless it is sticky and
  owned by the user (then others may add files but not replace the user's); otherwise every
  read and write raises :class:`UntrustedCache`, one line saying why (``neonlite doctor``'s
  cache row says the same);
* an entry is opened once (``O_NOFOLLOW``), checked on the open descriptor (``fstat``: a
  regular file owned by the user, not writable by group or others) and its checksum read from
  that descriptor; a CPU entry is then loaded through ``/proc/self/fd/N``, the very file
  checked, so a file swapped in after the check is never loaded.  An entry failing the owner
  or mode check is a :class:`ForeignEntry` (a kind of :class:`CorruptEntry`): it is never
  loaded, and the builder writes its own in its place;
* the folder is made with mode 0700.

Everything else kept in the folder goes through :class:`DiskCache` and the same rules.
"""
import hashlib
import json
import contextlib
import os
import re
import stat
import struct
from pathlib import Path

from ..atomic import atomic_write

MAGIC = b"NLKCACH1"
TRAILER = struct.Struct("<8sQQ32s")
FORMAT_VERSION = 1
_TEMP_PREFIX = ".tmp-"
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_KEY_CHARS = 24
_ENTRY_NAME = re.compile(r"[A-Za-z0-9_.]+(-sm_\d+[a-z]?)?-[0-9a-f]{%d}\.(so|cubin|json)"
                         % _KEY_CHARS)
_TEMP_NAME = re.compile(r"\.%s\.[A-Za-z0-9_]+\.tmp\d+" % _ENTRY_NAME.pattern)


def cache_dir():
    """The cache directory (not created here)."""
    override = os.environ.get("NEONLITE_CACHE_DIR", "").strip()
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "neonlite" / "kernels"


def source_closure(path, text=None):
    """``[(file name, sha256 of its bytes)]`` for ``path`` and every file it includes with
    ``#include "..."`` (resolved against the including file's folder), recursively.

    ``text`` replaces the content of ``path`` itself (for generated sources).  An include that
    does not resolve to a file (a system header) is skipped; a cycle is visited once.
    """
    path = Path(path)
    seen, order = set(), []

    def visit(file, content):
        key = str(file.resolve()) if file.exists() else str(file)
        if key in seen:
            return
        seen.add(key)
        data = content.encode() if content is not None else file.read_bytes()
        order.append((file.name, hashlib.sha256(data).hexdigest()))
        for name in _INCLUDE.findall(data.decode(errors="replace")):
            child = file.parent / name
            if child.is_file():
                visit(child, None)

    visit(path, text)
    return order


def cache_key(parts):
    """sha256 hex digest of ``parts`` (a JSON-able dict) in canonical form."""
    blob = json.dumps({"format": FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def entry_name(variant, key, suffix, arch=None):
    """The file name of the entry of ``variant`` (with ``arch`` for CUDA) under ``key``."""
    middle = f"-{arch}" if arch else ""
    return f"{variant}{middle}-{key[:_KEY_CHARS]}{suffix}"


class CorruptEntry(Exception):
    """A cache file that is not a whole, checksummed entry (the message says what is wrong)."""


class ForeignEntry(CorruptEntry):
    """A cache file another user could have written (owned by someone else, writable by group
    or others, or not a regular file): never loaded."""


class UntrustedCache(OSError):
    """A cache folder other users can write (see the module docstring); the message says
    why and what to do."""


_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def folder_risk(root):
    """Why other users could plant kernels in folder ``root`` (``"writable by other users
    (mode 777, not sticky)"``), or None (also when it does not exist yet)."""
    try:
        info = os.stat(root)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode) or not info.st_mode & _OTHERS_WRITE:
        return None
    if info.st_mode & stat.S_ISVTX and info.st_uid == os.geteuid():
        return None
    whose = "not sticky" if info.st_uid == os.geteuid() else \
        f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    return f"writable by other users (mode {stat.S_IMODE(info.st_mode):o}, {whose})"


def folder_problem(root):
    """The one-line refusal of folder ``root`` (see :func:`folder_risk`), or None."""
    risk = folder_risk(root)
    return None if risk is None else (
        f"the kernel cache {root} is {risk}, so a kernel planted there would run as you: use "
        f"a folder only you can write (chmod go-w, or set NEONLITE_CACHE_DIR)")


def entry_problem(info):
    """Why an entry of ``os.fstat`` result ``info`` must not be loaded, or None."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if info.st_mode & _OTHERS_WRITE:
        return f"writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def pack_entry(payload, meta):
    """The bytes of an entry holding ``payload`` and metadata dict ``meta``."""
    blob = json.dumps(meta, sort_keys=True).encode()
    digest = hashlib.sha256(payload + blob).digest()
    return payload + blob + TRAILER.pack(MAGIC, len(payload), len(blob), digest)


def unpack_entry(data):
    """``(payload, meta)`` of entry bytes ``data``; raises :class:`CorruptEntry`."""
    if len(data) < TRAILER.size:
        raise CorruptEntry(f"{len(data)} bytes is shorter than the {TRAILER.size}-byte trailer")
    magic, n_payload, n_meta, digest = TRAILER.unpack(data[-TRAILER.size:])
    if magic != MAGIC:
        raise CorruptEntry("no entry trailer at the end of the file (truncated?)")
    if n_payload + n_meta + TRAILER.size != len(data):
        raise CorruptEntry(f"the trailer announces {n_payload + n_meta + TRAILER.size} bytes "
                           f"but the file has {len(data)}")
    body = data[:n_payload + n_meta]
    if hashlib.sha256(body).digest() != digest:
        raise CorruptEntry("checksum mismatch")
    try:
        meta = json.loads(body[n_payload:].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptEntry(f"unreadable metadata: {err}") from None
    return body[:n_payload], meta


class DiskCache:
    """Entries in one directory (``root``, default :func:`cache_dir`), under the rules of the
    module docstring."""

    def __init__(self, root=None):
        self._root = root

    @property
    def root(self):
        """The directory: the one given, else :func:`cache_dir` as the environment says now."""
        return Path(self._root) if self._root is not None else cache_dir()

    def path(self, filename):
        return self.root / filename

    def check_folder(self):
        """Raise :class:`UntrustedCache` when other users can write the folder."""
        problem = folder_problem(self.root)
        if problem:
            raise UntrustedCache(problem)

    @contextlib.contextmanager
    def opened(self, filename):
        """``with cache.opened(name) as entry``: ``entry`` is None where there is no such
        file, else ``(fd, payload, meta)`` of the file opened once and checked on its
        descriptor (owner, mode, trailer, checksum); the descriptor stays open in the block
        (load the entry through it: ``/proc/self/fd/<fd>``).  Raises :class:`UntrustedCache`,
        :class:`ForeignEntry` or :class:`CorruptEntry`."""
        self.check_folder()
        try:
            fd = os.open(self.path(filename), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK |
                         getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            yield None
            return
        except OSError as err:
            raise ForeignEntry(f"cannot be opened as a regular file ({err.strerror})") from None
        try:
            problem = entry_problem(os.fstat(fd))
            if problem:
                raise ForeignEntry(problem)
            with os.fdopen(os.dup(fd), "rb") as file:
                payload, meta = unpack_entry(file.read())
            yield fd, payload, meta
        finally:
            os.close(fd)

    def read(self, filename):
        """``(payload, meta)`` of entry ``filename``; ``None`` if there is no such file; raises
        :class:`CorruptEntry` (:class:`ForeignEntry`) for a damaged (another user's) one and
        :class:`UntrustedCache` for a folder others can write."""
        with self.opened(filename) as entry:
            return None if entry is None else entry[1:]

    def make_folder(self):
        """Make the folder (mode 0700; its parents as the umask says) and check it."""
        root = self.root
        root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o700)
        self.check_folder()

    def write(self, filename, payload, meta):
        """Store an entry atomically (temporary file + ``os.replace``); returns its path."""
        self.make_folder()
        with atomic_write(self.path(filename), mode=0o644) as out:
            out.write(pack_entry(payload, meta))
        return self.path(filename)

    def entries(self):
        """``[(path, meta or the CorruptEntry)]`` for every entry file (a
        :class:`ForeignEntry` for one of another user's); raises :class:`UntrustedCache`."""
        if not self.root.is_dir():
            return []
        self.check_folder()
        found = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith((_TEMP_PREFIX, ".")) or not path.is_file():
                continue
            try:
                found.append((path, self.read(path.name)[1]))
            except CorruptEntry as err:
                found.append((path, err))
        return found

    def clean(self):
        """Delete every entry and leftover temporary file (files named as :func:`entry_name`
        makes them, nothing else); returns how many files went."""
        if not self.root.is_dir():
            return 0
        removed = 0
        for path in self.root.iterdir():
            if path.is_file() and (path.name.startswith(_TEMP_PREFIX)
                                   or _ENTRY_NAME.fullmatch(path.name)
                                   or _TEMP_NAME.fullmatch(path.name)):
                path.unlink(missing_ok=True)
                removed += 1
        return removed
