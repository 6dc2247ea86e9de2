"""The op rows of the profile table: each backend op span (a row of the op table, timed by
:mod:`.instrument`) is put under the row whose time contains it, the way PyTorch's profiler
nests operators under ``record_function`` ranges.

An op inside a layer's fprop or bprop belongs to the innermost layer around it (a compound
layer's ops that run inside a nested layer belong to the nested layer); any other op belongs
to the top-level span around it (``cost``, ``optimizer``, ``zero_grads``, ``finite_check``,
``comm``), or to ``op`` when the training loop or a callback called it outside every timed
span.  What a row's time holds besides its ops and its nested layers is its ``between_ops``
time (the Python between the ops, views, allocation, work done outside the op table), so
every row adds up exactly: ``ops + nested layers + between ops = row``.

Times are means per profiled step, in ms; GFLOP/s and GB/s are the op's FLOPs and bytes (its
op-table cost, :mod:`.flops`) over its own time.
"""
from collections import defaultdict

PASSES = ("fprop", "bprop")


def _owner(span):
    """``(key, pass)`` of the row op ``span`` belongs to: ``(id(layer), "fprop"|"bprop")``
    for the innermost layer span around it, else ``(category, None)`` of the top-level span
    around it (``"op"`` when the op is itself top-level)."""
    top, outer = span, span.parent
    while outer is not None and outer.cat != "step":
        if outer.cat in PASSES:
            return outer.owner, outer.cat
        top, outer = outer, outer.parent
    return top.cat, None


def _enclosing_layer(span):
    """The innermost layer (fprop/bprop) span around ``span``, or None."""
    outer = span.parent
    while outer is not None and outer.cat not in PASSES:
        outer = outer.parent
    return outer


def _new_op():
    return {"calls": 0, "fprop": 0.0, "bprop": 0.0, "other": 0.0, "flops": 0.0, "bytes": 0.0,
            "variants": set()}


class OpBreakdown:
    """The op spans of ``spans`` gathered by owning row: :meth:`layer_ops` and
    :meth:`step_ops` give a row's op entries, :meth:`nested` the time of a layer's nested
    layers per pass (seconds, summed over the profiled steps)."""

    def __init__(self, spans):
        self._ops = defaultdict(lambda: defaultdict(_new_op))
        self._nested = defaultdict(lambda: dict.fromkeys(PASSES, 0.0))
        for span in spans:
            if span.cat == "op":
                key, pass_ = _owner(span)
                entry = self._ops[key][span.name]
                entry["calls"] += 1
                entry[pass_ or "other"] += span.seconds
                entry["flops"] += span.flops
                entry["bytes"] += span.nbytes
                variant = span.args.get("variant")
                if variant:
                    entry["variants"].add(variant)
            elif span.cat in PASSES:
                outer = _enclosing_layer(span)
                if outer is not None:
                    self._nested[outer.owner][outer.cat] += span.seconds

    def nested(self, layer_id):
        """``{"fprop": s, "bprop": s}``: the time of the layers nested in ``layer_id``'s
        spans."""
        return self._nested.get(layer_id, dict.fromkeys(PASSES, 0.0))

    def layer_ops(self, layer_id, nsteps, step_s, peak):
        """The op entries of the layer with ``id`` ``layer_id`` (see :func:`_entry`)."""
        return self._entries(layer_id, nsteps, step_s, peak)

    def step_ops(self, category, nsteps, step_s, peak):
        """The op entries of the top-level step row ``category`` (``cost``, ``optimizer``,
        ...; ``op`` for the ops outside every timed span)."""
        return self._entries(category, nsteps, step_s, peak)

    def _entries(self, key, nsteps, step_s, peak):
        found = self._ops.get(key, {})
        entries = [_entry(name, e, nsteps, step_s, peak) for name, e in found.items()]
        return sorted(entries, key=lambda e: (-e["ms"], e["name"]))


def _entry(name, e, nsteps, step_s, peak):
    """One op row: ``name`` (the op table's), ``calls`` per step, ``fprop_ms``/``bprop_ms``
    (inside a layer's fprop/bprop; 0 elsewhere), ``ms`` (all its time), ``pct_step``,
    ``gflop_per_step``, ``gflops``, ``pct_peak`` (None without a peak), ``gbps``,
    ``variants`` (the kernel variants it ran, sorted)."""
    busy = e["fprop"] + e["bprop"] + e["other"]
    gflops = e["flops"] / busy / 1e9 if busy > 0 else 0.0
    return {"name": name, "calls": e["calls"] / nsteps,
            "fprop_ms": 1e3 * e["fprop"] / nsteps, "bprop_ms": 1e3 * e["bprop"] / nsteps,
            "ms": 1e3 * busy / nsteps,
            "pct_step": 100.0 * busy / nsteps / step_s if step_s else 0.0,
            "gflop_per_step": e["flops"] / nsteps / 1e9, "gflops": gflops,
            "pct_peak": 100.0 * gflops / peak if peak else None,
            "gbps": e["bytes"] / busy / 1e9 if busy > 0 else 0.0,
            "variants": sorted(e["variants"])}


def between_layer_ops(row, ops, nested, nsteps):
    """``{"fprop_ms": ..., "bprop_ms": ...}``: the part of a layer row's time that is in
    neither its ops nor its nested layers (``nested``: seconds per pass over the steps)."""
    return {f"{p}_ms": row[f"{p}_ms"] - sum(op[f"{p}_ms"] for op in ops)
            - 1e3 * nested[p] / nsteps for p in PASSES}
