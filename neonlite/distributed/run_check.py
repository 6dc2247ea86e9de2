"""Every rank runs the same run: the ranks' run descriptions are compared at start-up, before
the model allocates a buffer.

Ranks started with different settings (one ``-d f64``, the other ``f32``; another ``-z``, layer
shape, data set, ``--max-batches``, learning rate or optimizer) would exchange buffers of
different sizes or types (memory corruption in the C library, a bare ``MPI_ERR_IN_STATUS``) or
silently train different models.  Each rank describes its run as named items
(:func:`run_items`: the whole run description, the data set's size and shape, the step limits,
the seed policy), hashes each item (SHA-256 of its canonical JSON, the first 8 bytes), and one
``MPI_Allgather`` of these fixed-size digest vectors (:data:`SLOTS` x 8 bytes) tells every rank
every rank's digests.  Where they differ, every rank knows it at once: the lowest rank whose
digests differ from rank 0's and its first differing item are looked up (one more gather,
of that item's value), rank 0 prints one line naming the rank, the setting (down to the
key path inside it) and both values::

    neonlite: error: rank 1's datatype (-d) is 'f64', rank 0's is 'f32'

and every rank exits with status 1, before any buffer of the model exists.  The comparison is
a start-up stage (:mod:`.startup`): a rank that never arrives ends the job after the
collective timeout.  :class:`~neonlite.distributed.data_parallel.DataParallel` compares the
model's layout the same way (:func:`layout_items`) before its first broadcast, for runs
through the Python API, raising :class:`DistributedError` on every rank.
"""
import hashlib
import json
import sys

import numpy as np

from .errors import DistributedError

#: digest slots in the gathered vector (every rank sends the same size whatever its items)
SLOTS = 64
#: how an item is named in the message
LABELS = {"datatype": "datatype (-d)", "batchsize": "batch size (-z)",
          "epochs": "epochs (-e)", "rng_seed": "rng_seed (-r)", "backend": "backend (-b)",
          "max_batches": "--max-batches", "data_shape": "data set's example shape",
          "train_size": "training set size", "valid_size": "validation set size",
          "resume": "--resume checkpoint", "model_file": "--model-file checkpoint",
          "version": "neonlite version",
          "tensors": "parameters", "sync_bn": "sync_bn"}
#: the run description's keys that only rank 0 uses (checkpoint path and period)
RANK0_ONLY = ("save_path", "serialize")


def run_items(description, *, rng_seed, data_shape, train_size, valid_size, max_batches,
              resume=None, model_file=None, version=None):
    """The named items a rank's run is compared by: every key of ``description`` (a
    ``RunConfig.description()``: layers, cost, optimizer, data set, batch size, data type,
    epochs, ...) except :data:`RANK0_ONLY`; ``rng_seed`` as the user gave it (None: drawn by
    rank 0), the data set's example shape and sizes, ``--max-batches``, the checkpoints a run
    starts from and the neonlite version."""
    items = {key: value for key, value in description.items() if key not in RANK0_ONLY}
    items.update(rng_seed=rng_seed, data_shape=list(data_shape or ()), train_size=train_size,
                 valid_size=valid_size, max_batches=max_batches, resume=resume,
                 model_file=model_file, version=version)
    return items


def _canonical(value):
    return json.dumps(value, sort_keys=True, default=repr)


def digests(items):
    """``(SLOTS,)`` uint64: item i's digest in slot i (items in sorted name order), the
    number of items in the last slot."""
    names = sorted(items)
    if len(names) >= SLOTS:
        raise ValueError(f"{len(names)} run items do not fit the {SLOTS} digest slots")
    out = np.zeros(SLOTS, dtype=np.uint64)
    for slot, name in enumerate(names):
        blob = f"{name}={_canonical(items[name])}".encode()
        out[slot] = int.from_bytes(hashlib.sha256(blob).digest()[:8], "little")
    out[-1] = len(names)
    return out


def first_difference(mine, theirs, path=""):
    """``(key path, their value, my value)`` of the first place two JSON-like values differ
    (``path`` like ``[2].config.nout``; a mapping's ``type`` is compared before its other
    keys, so two optimizers differ by their type), or None when they are equal."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs), key=lambda k: (k != "type", str(k))):
            if key not in mine or key not in theirs:
                return f"{path}.{key}", theirs.get(key, "(absent)"), mine.get(key, "(absent)")
            found = first_difference(mine[key], theirs[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
        for i, (a, b) in enumerate(zip(mine, theirs)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(mine, list) and isinstance(theirs, list):
        return f"{path} length", len(theirs), len(mine)
    return None if _canonical(mine) == _canonical(theirs) else (path, theirs, mine)


def _short(value, limit=60):
    text = repr(value) if not isinstance(value, (dict, list)) else _canonical(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def mismatch_message(rank, name, theirs, mine):
    """The line for rank ``rank``'s item ``name`` (value ``theirs``) against rank 0's
    (``mine``)."""
    where, a, b = first_difference(mine, theirs) or ("", theirs, mine)
    return f"rank {rank}'s {LABELS.get(name, name)}{where} is {_short(a)}, rank 0's is " \
        f"{_short(b)}"


def layout_items(model, sync_bn):
    """The items :class:`~neonlite.distributed.data_parallel.DataParallel` compares before
    its first broadcast (Python API runs too): every parameter's and buffer's name, shape and
    element type, the per-rank batch size and ``sync_bn``."""
    tensors = {name: {"shape": list(t.shape), "dtype": str(np.dtype(t.dtype))}
               for name, t in model.named_tensors().items()}
    return {"tensors": tensors, "batchsize": int(model.be.bsz), "sync_bn": bool(sync_bn)}


def check_same_run(world, items, exit=True):
    """Compare ``items`` (:func:`run_items`) over the ranks of ``world`` (collective: every
    rank calls it once, at start-up); returns when all agree.  Else, with ``exit``, rank 0
    prints the one line of :func:`mismatch_message` and every rank exits with status 1;
    without, every rank raises :class:`DistributedError` with that line."""
    if world.comm is None or world.size == 1:
        return
    mine = digests(items)
    gathered = np.empty((world.size, SLOTS), dtype=np.uint64)
    world.startup_stage("compare")
    world.comm.Allgather(mine, gathered)
    differing = [r for r in range(world.size) if not np.array_equal(gathered[r], gathered[0])]
    if not differing:
        if world.startup is not None:
            world.startup.idle()
        return
    rank = differing[0]
    names = sorted(items)
    slot = next((i for i in range(len(names)) if gathered[rank][i] != gathered[0][i]), None)
    name = names[slot] if slot is not None else "version"
    values = world.comm.allgather(_canonical(items.get(name)))
    line = mismatch_message(rank, name, json.loads(values[rank]), json.loads(values[0])) + \
        "; start every rank with the same settings"
    world.startup_done()
    if not exit:
        raise DistributedError(line)
    if world.rank == 0:
        print(f"neonlite: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(1)
