"""Chrome trace-event JSON (opens in Perfetto and ``chrome://tracing``).

One complete event (``"ph": "X"``) per span: ``ts``/``dur`` in microseconds from the clock
origin (under MPI: the moment every rank left a barrier at the start, so the ranks share one
time axis), ``pid`` the rank, ``tid`` 0; ``args`` carry the layer type, the op's kernel
variant, FLOPs and bytes.  Metadata events name each process ``rank r``.  Spans nest by time
on one thread, which is how the viewers draw layer slices with their ops inside.
"""
import json
import os
import tempfile


def trace_events(spans, origin, rank=0):
    """The events of ``spans`` (resolved :class:`~.recorder.Span` objects) for process row
    ``rank``, times relative to ``origin`` (seconds)."""
    events = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
               "args": {"name": f"rank {rank}"}},
              {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
               "args": {"sort_index": rank}},
              {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0,
               "args": {"name": "training"}}]
    for span in spans:
        args = dict(span.args)
        if span.flops:
            args["flops"] = span.flops
        if span.nbytes:
            args["bytes"] = span.nbytes
        events.append({"name": span.name, "cat": span.cat, "ph": "X", "pid": rank, "tid": 0,
                       "ts": round((span.begin - origin) * 1e6, 3),
                       "dur": round((span.end - span.begin) * 1e6, 3), "args": args})
    return events


def rank_path(path, rank):
    """``TRACE.json`` -> ``TRACE.rank{rank}.json``."""
    stem = path[:-5] if path.endswith(".json") else path
    return f"{stem}.rank{rank}.json"


def write_trace(path, events, metadata=None):
    """Write ``{"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata}`` to
    ``path`` atomically (a temporary file in the same folder, then a rename)."""
    doc = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata or {}}
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trace-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_writable(path, what="--profile"):
    """None when a trace can be written at ``path``, else a one-line message: its folder must
    exist and take a new file (tried with a temporary file, removed at once) and ``path``
    must not be a folder.  Run before training, so a bad path fails first."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{what} {path}: is a folder; give a file name such as trace.json"
    if not os.path.isdir(folder):
        return f"{what} {path}: the folder {folder} does not exist"
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trace-", suffix=".tmp")
    except OSError as err:
        return f"{what} {path}: cannot write in {folder} ({err.strerror or err})"
    os.close(fd)
    os.unlink(tmp)
    return None


def write_rank_traces(path, spans, origin, world, metadata):
    """Write this process's trace.  Alone: ``path``.  Under MPI (collective): every rank
    writes ``TRACE.rank{r}.json`` and rank 0 also ``path``, all ranks merged, one process row
    each.  Returns the paths written by this rank."""
    events = trace_events(spans, origin, world.rank if world is not None else 0)
    if world is None or world.size == 1:
        write_trace(path, events, metadata)
        return [path]
    mine = rank_path(path, world.rank)
    write_trace(mine, events, dict(metadata, rank=world.rank))
    gathered = world.comm.gather(events, root=0)
    if world.rank != 0:
        return [mine]
    merged = [event for rank_events in gathered for event in rank_events]
    write_trace(path, merged, dict(metadata, ranks=world.size))
    return [mine, path]
