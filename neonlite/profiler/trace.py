"""Chrome trace-event JSON (opens in Perfetto and ``chrome://tracing``).

One complete event (``"ph": "X"``) per span: ``ts``/``dur`` in microseconds from the clock
origin (under MPI: the moment every rank left a barrier at the start, so the ranks share one
time axis), ``pid`` the rank, ``tid`` 0; ``args`` carry the layer type, the op's kernel
variant, FLOPs and bytes.  Metadata events name each process ``rank r``.  Spans nest by time
on one thread, which is how the viewers draw layer slices with their ops inside.
"""
import json

from ..atomic import atomic_write
from ..output_paths import OutputPathError, check_output


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
    ``path`` atomically (:func:`neonlite.atomic.atomic_write`)."""
    doc = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata or {}}
    with atomic_write(path) as out:
        out.write(json.dumps(doc).encode())


def check_writable(path, what="--profile"):
    """None when a trace can be written at ``path`` (the rule of
    :mod:`neonlite.output_paths`: a writable folder, a new or regular file, a temporary name
    that fits), else a one-line message.  Run before training, so a bad path fails first."""
    try:
        check_output(path, what)
    except OutputPathError as err:
        return str(err)
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
