"""Opening HDF5 files that read nothing but themselves: the one way every HDF5 reader of
neonlite (checkpoints of every format version, HDF5 data files, training logs) opens a file.

:func:`open_hdf5` opens ``path`` read-only only when it is a regular file (a FIFO or device
is refused before it is opened), then walks every link of the file *before any dataset is
read* and refuses, in one line naming the file and the object:

* a link that is not a hard link (a soft link, an external link to another file, a
  user-defined link);
* a dataset whose storage is not inside the file: external storage (raw data in other
  files, ``/etc/passwd``, a FIFO, ``/dev/zero``) or a virtual dataset (data mapped from other
  files, or zeros when they are missing).

neonlite's writers never make any of these.  (HDF5's external-file and virtual-file prefixes
are per-dataset access settings that h5py's path access does not take; the walk is the guard:
no dataset is opened for reading before it has passed.)
:func:`declared_bytes` gives what a dataset's declared shape and dtype promise, so readers
can compare it with the file's size or the expected shapes before reading.
"""
import os

import numpy as np

from .safe_files import regular_stat
from .host_memory import available_bytes, describe_bytes

#: more objects than this in one file is not a neonlite file (and makes the walk slow)
MAX_OBJECTS = 1_000_000


def open_hdf5(path, error, what="HDF5 file", swmr=False):
    """``h5py.File`` of regular file ``path`` read-only, every object checked (see the module
    docstring); ``error`` (the caller's exception class) with one line otherwise.  ``swmr``:
    opened as a single-writer/multiple-reader reader (a file still being appended to, or left
    by a killed writer, reads as what was flushed)."""
    import h5py
    info = regular_stat(path, error, what)
    try:
        f = h5py.File(path, "r", swmr=swmr)
    except OSError as err:
        raise error(f"{path}: not a readable HDF5 file; it may be truncated or not a "
                    f"{what} ({_cut(err)})") from None
    try:
        _check_same_file(f, info, path, error)
        check_self_contained(f, path, error)
    except (KeyError, OSError, RuntimeError, ValueError, TypeError) as err:
        f.close()
        if isinstance(err, error):
            raise
        raise error(f"{path}: damaged {what}: cannot read its contents "
                    f"({type(err).__name__}: {_cut(err)})") from None
    except BaseException:
        f.close()
        raise
    return f


def _check_same_file(f, info, path, error):
    """The open file is the regular file that was checked (not one swapped in since)."""
    try:
        handle = f.id.get_vfd_handle()
        opened = os.fstat(handle)
    except (AttributeError, OSError, ValueError, TypeError):
        return
    if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
        raise error(f"{path}: the file changed while it was opened")


def check_self_contained(f, path, error):
    """Walk every link under the root of open file ``f`` (hard links only are followed, each
    object once) and raise ``error`` for the first link that is not hard or dataset whose
    data is not stored in the file."""
    import h5py
    seen, stack, count = set(), [("", f)], 0
    while stack:
        prefix, group = stack.pop()
        for name in group:
            where = f"{prefix}/{name}"
            count += 1
            if count > MAX_OBJECTS:
                raise error(f"{path}: more than {MAX_OBJECTS:,} objects; not a neonlite file")
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                raise error(f"{path}: {where} is a soft link (to {link.path}); neonlite reads "
                            f"only objects stored in the file itself")
            if isinstance(link, h5py.ExternalLink):
                raise error(f"{path}: {where} is an external link (to {link.filename}:"
                            f"{link.path}); neonlite reads only objects stored in the file "
                            f"itself")
            if not isinstance(link, h5py.HardLink):
                raise error(f"{path}: {where} is a user-defined link; neonlite reads only "
                            f"objects stored in the file itself")
            obj = group[name]
            key = (obj.id.fileno, getattr(obj.id, "objno", None) or hash(obj.id))
            if key in seen:
                continue
            seen.add(key)
            if isinstance(obj, h5py.Dataset):
                check_stored_inside(obj, path, error, where)
            elif isinstance(obj, h5py.Group):
                stack.append((where, obj))


def check_stored_inside(dset, path, error, where=None):
    """``error`` unless dataset ``dset``'s data is stored in its own file (not external, not
    virtual)."""
    import h5py
    where = where or dset.name
    plist = dset.id.get_create_plist()
    if plist.get_layout() == h5py.h5d.VIRTUAL:
        raise error(f"{path}: {where} is a virtual dataset (its data is mapped from other "
                    f"files); neonlite reads only data stored in the file itself")
    if plist.get_external_count() > 0:
        target = plist.get_external(0)[0]
        target = target.decode(errors="replace") if isinstance(target, bytes) else target
        raise error(f"{path}: {where} has external storage (its data is in {target}); "
                    f"neonlite reads only data stored in the file itself")


def declared_bytes(dset):
    """The bytes dataset ``dset``'s declared shape and dtype promise once read."""
    return int(np.prod(dset.shape, dtype=np.float64) * dset.dtype.itemsize)


def filter_ids(dset):
    """The HDF5 filter ids ``dset`` is stored through (compression, shuffle, checksums)."""
    plist = dset.id.get_create_plist()
    return [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]


#: deflate (gzip) cannot inflate more than about 1032 bytes from one; with shuffle and
#: fletcher32 (which do not grow data) the filters a compressed log may use
DEFLATE_MAX_RATIO = 1100
_LOSSLESS = {1: "deflate", 2: "shuffle", 3: "fletcher32"}


def check_declared_fit(f, path, error, what="file", compressed=False):
    """Before any dataset of open file ``f`` is read: ``error`` when the datasets' declared
    sizes add up to more bytes than the file holds (``compressed=False``: a file whose writer
    never compresses, where any filter is refused), or (``compressed=True``: deflate, shuffle
    and fletcher32 allowed) when one declares more than deflate could inflate its stored
    bytes to, or all together more than the memory available."""
    import h5py

    size = os.fstat(f.id.get_vfd_handle()).st_size
    datasets = []
    f.visititems(lambda name, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset)
                 else None)
    total = 0
    for dset in datasets:
        declared = declared_bytes(dset)
        promise = f"{dset.name} declares {dset.shape} {dset.dtype} ({declared:,} bytes)"
        filters = filter_ids(dset)
        if filters and not compressed:
            raise error(f"{path}: {promise} through a compression filter, which a {what} "
                        f"never uses")
        unknown = [i for i in filters if i not in _LOSSLESS]
        if unknown:
            raise error(f"{path}: {promise} through HDF5 filter {unknown[0]}; a {what} uses "
                        f"only {', '.join(_LOSSLESS.values())}")
        if filters and declared > DEFLATE_MAX_RATIO * dset.id.get_storage_size():
            raise error(f"{path}: {promise}, more than its {dset.id.get_storage_size():,} "
                        f"stored bytes can hold (a damaged or hostile {what})")
        total += declared
        if not compressed and total > size:
            raise error(f"{path}: {promise}, more than the {size:,} bytes the file holds (a "
                        f"damaged or hostile {what})")
    available = available_bytes()
    if compressed and available is not None and total > available:
        raise error(f"{path}: its datasets declare {describe_bytes(total)} in all, more than "
                    f"the {describe_bytes(available)} of memory available")


def _cut(err, limit=200):
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
