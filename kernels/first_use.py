"""Building the kernels a backend is missing, all at once, with one notice on stderr.

The first run on a machine (or after a compiler or source change) finds kernels that are not in
the cache; :func:`compile_missing` says so once, before it builds them::

    compiling 10 kernels for cooperlake (first use; cached in ~/.cache/neonlite/kernels)… 3/10

On a terminal the count is redrawn in place; elsewhere (a pipe, a log) the notice is one line
and a second line says when the compilers finished.
"""
import os
import sys
import time

from .cache import folder_problem
from .toolchain import find_c_compiler


def missing(builder, variants):
    """The variants in ``variants`` (CPU) that ``builder``'s cache does not hold."""
    return [spec for spec in variants if not builder.status(spec)[0]]


def cpu_name():
    """What ``-march=native`` compiles for (``cooperlake``, ``znver4``, ...)."""
    return find_c_compiler().target.rsplit("-", 1)[0]


def compile_missing(builder, variants, stream=None, jobs=None):
    """Build the variants of ``variants`` that are not cached, telling ``stream`` (default
    stderr) first; returns the :class:`~neonlite.kernels.build.BuildResult` list (empty when
    everything was cached, or nothing can be cached: a folder other users can write, which
    the loads then refuse, one line each)."""
    if folder_problem(builder.cache.root):
        return []
    todo = missing(builder, variants)
    if not todo:
        return []
    stream = stream or sys.stderr
    live = hasattr(stream, "isatty") and stream.isatty()
    head = (f"compiling {len(todo)} kernel{'s' if len(todo) != 1 else ''} for {cpu_name()} "
            f"(first use; cached in {builder.cache.root})\u2026")
    start = time.perf_counter()
    if live:
        stream.write(f"{head} 0/{len(todo)}")
    else:
        stream.write(head + "\n")
    stream.flush()

    def progress(done, total):
        if live:
            stream.write(f"\r{head} {done}/{total}")
            stream.flush()

    results = builder.build_all("cpu", jobs=jobs or os.cpu_count() or 1, variants=todo,
                                progress=progress)
    failed = sum(r.status == "failed" for r in results)
    tail = f"{len(todo) - failed}/{len(todo)} in {time.perf_counter() - start:.1f} s" + \
        (f", {failed} failed" if failed else "")
    stream.write(f"\r{head} {tail}\n" if live else f"compiled {tail}\n")
    stream.flush()
    return results
