"""Timing wrappers put on the *instances* of one training run while a profile window is
open, and taken off when it closes: each layer's ``fprop``/``bprop`` (containers and a
``TransformerBlock``'s sub-layers too, so spans nest), the cost, ``zero_grads``, the
optimizer step, the finiteness check after it (``Model.first_nonfinite``), the public op
methods of the backend object, and the data-parallel gradient synchronisation (bucket starts
and the wait for them).

Nothing in the layers, the model or the backends knows about the profiler: a wrapper is an
entry in the instance's ``__dict__`` that shadows the class's method, and detaching puts back
exactly what was there before (another wrapper, such as data parallelism's bprop hook, or
nothing).  With no profile open the hot path is the unchanged code.
"""
from .flops import OP_COSTS

# backend methods timed as ops (those a layer calls); plan makers, allocation and op-tree
# builders (add, sum, ...: they compute nothing) are left alone
OP_NAMES = tuple(name for name in OP_COSTS if not name.startswith("_"))
# the CPU backend's element-wise entry point (``tensor[:] = tree`` comes here, not through
# ``execute``); named in the profile by the op-table row it carries out
CPU_OPTREE = "evaluate_into"
OPTREE_ROW = "execute"


def layer_children(layer):
    """The layers directly inside ``layer`` (containers, residual branches, a transformer
    block's sub-layers), in execution order."""
    for attr in ("sublayers", "layers", "branches"):
        children = getattr(layer, attr, None)
        if isinstance(children, (list, tuple)):
            return [c for c in children if hasattr(c, "fprop")]
    return []


def walk_layers(layers, depth=0):
    """(layer, depth) for every layer of ``layers`` and below, in order."""
    for layer in layers:
        yield layer, depth
        yield from walk_layers(layer_children(layer), depth + 1)


def labelled_layers(layers, parent=None, depth=0):
    """(layer, depth, label) for every layer, as :func:`walk_layers`; the label is the layer's
    name, or ``<name>.<type>`` for the parts of a compound layer that share its name
    (``Conv_0.Convolution`` inside ``Conv_0``)."""
    for layer in layers:
        label = str(layer.name)
        if parent is not None and layer.name == parent.name:
            label = f"{layer.name}.{type(layer).__name__}"
        yield layer, depth, label
        yield from labelled_layers(layer_children(layer), layer, depth + 1)


class Instrumentation:
    """Wrappers for one model, its cost, optimizer and backend, recording into ``recorder``.
    :meth:`attach` puts them on; :meth:`detach` restores every attribute it changed."""

    def __init__(self, recorder):
        self.recorder = recorder
        self._undo = []

    def attach(self, model, optimizer):
        rec = self.recorder
        for layer, depth, label in labelled_layers(model.layers.layers):
            args = {"type": type(layer).__name__, "depth": depth}
            self._wrap(layer, "fprop", self._timed(label, "fprop", args, id(layer)))
            self._wrap(layer, "bprop", self._timed(label, "bprop", args, id(layer)))
        if model.cost is not None:
            self._wrap(model.cost, "cost_and_errors", self._timed("cost", "cost", {}))
        self._wrap(model, "zero_grads", self._timed("zero_grads", "zero_grads", {}))
        self._wrap(model, "first_nonfinite", self._timed("finite check", "finite_check", {}))
        self._wrap(optimizer, "optimize", self._timed("optimizer", "optimizer",
                                                      {"type": type(optimizer).__name__}))
        self._attach_backend(model.be)
        sync = model.grad_sync
        if sync is not None:
            self._wrap(sync, "finish", self._timed("allreduce wait", "comm", {}))
            transport = getattr(sync, "transport", None)
            if transport is not None:
                self._wrap(transport, "start", self._bucket_start(transport.start))
                self._wrap(transport, "finish", self._timed("allreduce bucket wait", "comm",
                                                            {}))
        rec.attached = True

    def _attach_backend(self, be):
        for name in OP_NAMES:
            if callable(getattr(be, name, None)):
                self._wrap(be, name, self._op(name, name, be))
        if hasattr(be, CPU_OPTREE):
            self._wrap(be, CPU_OPTREE, self._op(CPU_OPTREE, OPTREE_ROW, be))

    def detach(self):
        """Put back every attribute :meth:`attach` replaced, newest first."""
        for obj, attr, had, old in reversed(self._undo):
            if had:
                obj.__dict__[attr] = old
            else:
                del obj.__dict__[attr]
        self._undo = []

    # ---- wrappers ------------------------------------------------------------------------------
    def _wrap(self, obj, attr, make):
        had = attr in obj.__dict__
        self._undo.append((obj, attr, had, obj.__dict__.get(attr)))
        obj.__dict__[attr] = make(getattr(obj, attr))

    def _timed(self, name, cat, args, owner=0):
        rec = self.recorder

        def make(inner):
            def timed(*a, **k):
                span = rec.open(name, cat, args, owner)
                try:
                    return inner(*a, **k)
                finally:
                    rec.close(span)
            return timed
        return make

    def _op(self, method, name, be):
        """An op wrapper: only the outermost backend call is a span (ops a backend method
        makes internally are part of it); its arguments are kept so FLOPs, bytes and the
        kernel variant are worked out after the window, off the timed path."""
        rec = self.recorder

        def make(inner):
            def op(*a, **k):
                if rec.in_op:
                    return inner(*a, **k)
                rec.in_op = True
                span = rec.open(name, "op")
                try:
                    return inner(*a, **k)
                finally:
                    rec.close(span)
                    rec.in_op = False
                    span.call = (method, be, a, k)
            return op
        return make

    def _bucket_start(self, inner):
        rec = self.recorder

        def start(bucket, backend):
            span = rec.open(f"allreduce bucket {getattr(bucket, 'index', '?')}", "comm",
                            {"bytes": int(getattr(bucket, "nbytes", 0))})
            try:
                return inner(bucket, backend)
            finally:
                rec.close(span)
        return lambda _bound: start
