"""The profiler's record: nested spans (layer fprop/bprop, cost, optimizer, data, backend
ops, communication) with their clock marks, FLOPs and bytes.

A span's FLOPs and bytes are its own (a backend op's, from :mod:`.flops`) plus those of every
op inside it, so a layer's span carries the work of all the ops it ran.
"""
from .clock import HostClock
from .flops import op_cost


_NO_ARGS = {}


class Span:
    """One timed region: ``name`` (a layer name, an op name, ``optimizer``, ...), ``cat``
    (``fprop``, ``bprop``, ``cost``, ``optimizer``, ``data``, ``comm``, ``op``, ``step``,
    ``checkpoint``, ``zero_grads``), ``depth`` (0 outermost), ``begin``/``end`` (clock marks,
    seconds after :meth:`Recorder.resolve`), ``flops``/``nbytes`` (including nested ops),
    ``args`` (extra fields for the trace: layer type, op variant; never mutated in place),
    ``parent`` (the enclosing span or None), ``owner`` (``id`` of the layer a fprop/bprop
    span belongs to), ``call`` (an op's method, backend and arguments until resolved).
    Slotted and built positionally: hundreds are made per profiled step."""

    __slots__ = ("name", "cat", "depth", "begin", "end", "flops", "nbytes", "args", "parent",
                 "call", "owner")

    def __init__(self, name, cat, depth, begin, end=None, args=None, parent=None, owner=0):
        self.name, self.cat, self.depth, self.begin, self.end = name, cat, depth, begin, end
        self.args = _NO_ARGS if args is None else args
        self.parent, self.owner = parent, owner
        self.flops = self.nbytes = 0.0
        self.call = None

    @property
    def seconds(self):
        return self.end - self.begin


class Recorder:
    """Collects spans; ``open``/``close`` pair up (the wrappers of :mod:`.instrument` close
    in ``finally``).  ``attached``: the wrappers are on (a profile window is open);
    ``in_op``: a backend op is running, so the ops it calls are not spans of their own."""

    def __init__(self, clock=None):
        self.clock = clock or HostClock()
        self.spans = []
        self.stack = []
        self.in_op = False
        self.steps = []
        self.resolved = False
        self.attached = False

    def open(self, name, cat, args=None, owner=0):
        stack = self.stack
        span = Span(name, cat, len(stack), self.clock.stamp(), None, args,
                    stack[-1] if stack else None, owner)
        stack.append(span)
        self.spans.append(span)
        return span

    def close(self, span):
        span.end = self.clock.stamp()
        self.stack.pop()

    def mark_step(self, begin, end):
        """Record one training step's extent (two clock marks): from the end of the previous
        step (or the opening of the window) to the end of this one."""
        self.steps.append((begin, end))

    def resolve(self):
        """Turn every mark into seconds (on the GPU: after waiting for the device)."""
        if self.resolved:
            return
        self.clock.resolve()
        seconds = self.clock.seconds
        for span in self.spans:
            span.begin, span.end = seconds(span.begin), seconds(span.end)
        self.steps = [(seconds(a), seconds(b)) for a, b in self.steps]
        for span in self.spans:
            if span.call is not None:
                _count_work(span)
        self.resolved = True


def _count_work(span):
    """An op span's FLOPs, bytes and kernel variant from its kept arguments, added to it and
    to every span around it."""
    method, be, args, kwargs = span.call
    span.call = None
    flops, nbytes = op_cost(method, args, kwargs)
    variant = be.kernel_variant(method, args, kwargs)
    if variant:
        span.args = dict(span.args, variant=variant)
    outer = span
    while outer is not None:
        outer.flops += flops
        outer.nbytes += nbytes
        outer = outer.parent
