"""The layer lifecycle shared by every layer.

``configure(in_shape) -> out_shape`` (shapes exclude the batch axis and are checked here),
``allocate()`` (output and delta buffers, once), ``fprop(x, inference=False) -> output``, and
``bprop(error) -> error for the layer below``, which *accumulates* parameter gradients into
``Parameter.grad`` (the model zeroes them at the start of each step).  Activations are
batch-first; images NHWC, sequences (N, T, D).

Every layer's ``fprop`` and ``bprop`` check the batch they are given against the configured
shapes before they run (:meth:`Layer.__init_subclass__`), called directly or from a container:
the buffers made at ``allocate`` and the kernels writing them take nothing else.

Sequences of any length up to the configured one: a layer with ``variable_steps`` configured
for sequences (T, ...) takes batches (N, T', ...) of any 1 <= T' <= T.  Its buffers are made
once, for T; a batch of T' steps runs on *views of its length* (:meth:`Layer.set_steps`,
called by the check before fprop when T' changes): the first N*T'*... elements of each
buffer, viewed as (N, T', ...).  That view is contiguous and batch-major, as every buffer is
(a slice ``buf[:, :T']`` would not be), so the GEMMs, row kernels and reshapes of a layer run
on it unchanged; each length's views are made once (:func:`steps_view`), so nothing is
allocated or compiled after the first batch of a length.
"""
import functools

import numpy as np

from ..backends import get_backend
from ..config.values import describe_value, given_arguments


class ShapeError(ValueError):
    """A layer was given an input shape it cannot take; the message names the layers."""


class Parameter:
    """A learnable tensor ``value``, its gradient ``grad`` (same shape) and the optimizer's
    per-parameter ``states`` (a name -> tensor dict the optimizer fills on first use).

    ``name`` is ``"<layer name>.<param>"``; ``layer`` is the owning layer; ``arena`` the
    :class:`~neonlite.optimizers.arena.ParameterArena` whose buffers hold value, grad and
    states (set by the model; None outside one).
    """

    def __init__(self, layer, attr, value, grad):
        self.layer, self.attr, self.value, self.grad = layer, attr, value, grad
        self.states = {}
        self.arena = None

    @property
    def name(self):
        return f"{self.layer.name}.{self.attr}"

    def __repr__(self):
        return f"Parameter({self.name}, shape={self.value.shape})"


class FixedTensor:
    """Stands in for a parameter a layer was built without (``bias=False``): ``value`` zeros
    of ``shape``, ``grad`` a scratch buffer the gradient is written to and never read.
    Neither is learned nor saved."""

    def __init__(self, be, shape):
        self.value, self.grad = be.zeros(shape), be.zeros(shape)


class Layer:
    """Base of every layer.  Subclasses override ``_configure``, ``allocate``, ``fprop``,
    ``bprop`` and, when they learn, ``_make_params``.

    Every layer records the arguments its constructor was called with (in ``__new__``, so
    subclasses need do nothing), which :meth:`get_description` returns as neon's
    ``{type, config}`` schema.
    """

    #: how errors name a layer without a name (None: "the <class> layer")
    unnamed_description = None
    #: fprop / bprop take sequences (N, T', ...) of 1 to T steps, T the configured length
    variable_steps = False
    #: the buffers (attribute names) laid out per step, (N, T, ...) or (N*T, ...): a batch of
    #: T' steps runs on their views of its length (:meth:`set_steps`)
    stepped_buffers = ("outputs", "deltas")
    #: fprop / bprop check their batches themselves (not wrapped by ``__init_subclass__``)
    checks_own_batch = False

    def __new__(cls, *args, **kwargs):
        layer = super().__new__(cls)
        layer._given_args = given_arguments(cls, args, kwargs)
        return layer

    def __init_subclass__(cls, **kwargs):
        """Wrap the ``fprop`` / ``bprop`` a subclass defines so that, once the layer is
        configured, a batch that is not (bsz,) + ``in_shape`` (fprop's input) or (bsz,) +
        ``out_shape`` (bprop's error) raises :class:`ShapeError` naming the layer before
        anything runs."""
        super().__init_subclass__(**kwargs)
        for method, what, shape in (("fprop", "input", "in_shape"),
                                    ("bprop", "output gradient", "out_shape")):
            function = cls.__dict__.get(method)
            if function is not None and not hasattr(function, "checked_batch") and \
                    not cls.checks_own_batch:
                setattr(cls, method, _batch_checked(function, what, shape))

    def __init__(self, name=None):
        self.name = name
        self.in_shape = None
        self.out_shape = None
        self.be = None
        self.outputs = None
        self.deltas = None
        self.needs_deltas = True
        self.prev_name = None
        self.max_steps = self.steps = None
        self.out_stepped = False

    # ---- lifecycle ---------------------------------------------------------------------------
    def configure(self, in_shape, prev_name=None):
        """Check ``in_shape`` (one example's shape, no batch axis) and return the output shape."""
        self.be = get_backend()
        self.in_shape = tuple(int(s) for s in in_shape)
        self.prev_name = prev_name
        self.out_shape = tuple(int(s) for s in self._configure(self.in_shape))
        self.max_steps = self.steps = self._max_steps()
        self.out_stepped = self.max_steps is not None and len(self.out_shape) >= 2 and \
            self.out_shape[0] == self.max_steps
        self._full_buffers = self._step_views = None
        return self.out_shape

    def _max_steps(self):
        """T when this layer takes sequences of 1 to T steps (``variable_steps`` and a
        sequence input (T, D)), else None."""
        if self.variable_steps and len(self.in_shape) == 2:
            return self.in_shape[0]
        return None

    def set_steps(self, steps):
        """The next batches are sequences of ``steps`` (1..T) steps: each buffer named in
        ``stepped_buffers`` becomes its view of that length (made once per length and kept),
        the whole buffer again when ``steps`` is T.  Containers pass it on to their layers."""
        if steps == self.steps:
            return
        if self._full_buffers is None:
            self._full_buffers = {name: getattr(self, name) for name in self.stepped_buffers
                                  if getattr(self, name, None) is not None}
            self._step_views = {}
        views = self._step_views.get(steps)
        if views is None:
            views = {name: steps_view(self.be, full, self.be.bsz, self.max_steps, steps)
                     for name, full in self._full_buffers.items()}
            self._step_views[steps] = views
        for name, view in views.items():
            setattr(self, name, view)
        self.steps = steps

    def mask_view(self, mask, steps):
        """``mask`` for a batch of ``steps`` steps: the padding mask (N, T) an Embedding with
        a ``pad_id`` writes, per batch, on its view of the batch's length (the model hands
        that buffer to the layers after it, :func:`~neonlite.layers.shared.
        share_padding_masks`, recording it as ``shared_mask``) becomes that view; any other
        mask stays as it is (its user checks its shape)."""
        if mask is None or mask is not getattr(self, "shared_mask", None) or \
                mask.shape[1] == steps:
            return mask
        cache = self.__dict__.setdefault("_mask_views", {})
        view = cache.get(steps)
        if view is None:
            view = cache[steps] = steps_view(self.be, mask, mask.shape[0], mask.shape[1], steps)
        return view

    def steps_shape(self, shape):
        """``shape`` (one example's, (T, ...)) at the current number of steps."""
        return (self.steps,) + tuple(shape[1:])

    def _configure(self, in_shape):
        return in_shape

    def shape_error(self, expected):
        """A :class:`ShapeError` naming this layer, the one before it and both shapes."""
        before = f"the output of '{self.prev_name}'" if self.prev_name else "the model input"
        return ShapeError(f"layer '{self.name}' ({type(self).__name__}) expects {expected}, but "
                          f"{before} has shape {self.in_shape}")

    def not_configured(self, call):
        """The RuntimeError of ``call`` (fprop, bprop) made before :meth:`configure`."""
        where = f"layer '{self.name}' ({type(self).__name__})" if self.name else \
            self.unnamed_description or f"the {type(self).__name__} layer"
        return RuntimeError(f"{where}: {call} before the layer was configured and allocated; "
                            f"initialize the model first (model.initialize(dataset), or fit)")

    def check_batch(self, t, shape, what, source="as configured", steps=False):
        """Raise :class:`ShapeError` unless tensor ``t`` is a batch of the backend's size of
        examples of ``shape`` (with ``steps``, sequences (T, ...) may be shorter: 1 to T
        steps): the buffers made at ``allocate`` (and the kernels writing them) take nothing
        else.  ``source``: where ``shape`` comes from, for the message."""
        expected = (self.be.bsz,) + tuple(shape)
        got = tuple(t.shape)
        if got == expected:
            return
        only_steps = len(got) == len(expected) >= 2 and got[0] == expected[0] and \
            got[2:] == expected[2:]
        if steps and only_steps and 1 <= got[1] <= expected[1]:
            return
        too_long = steps and only_steps and got[1] > expected[1]
        named = self.leaves()[0] if too_long and not self.name else self  # the model: its first
        where = f"layer '{named.name}' ({type(named).__name__})" if named.name else \
            named.unnamed_description or f"the {type(named).__name__} layer"
        examples = f"sequences of 1 to {shape[0]} steps of shape {tuple(shape[1:])}" if steps \
            else f"examples of shape {tuple(shape)}"
        why = ""
        if only_steps and steps and got[1] > expected[1]:
            why = f": {got[1]} steps is longer than the maximum of {shape[0]}"
        elif only_steps and not steps and what == "input":
            why = f"; this layer takes only sequences of the {shape[0]} steps it was built for"
        raise ShapeError(f"{where}: the {what} has shape {got}; expected {expected} (a batch "
                         f"of {self.be.bsz} {examples}, {source}){why}")

    def allocate(self):
        """Make output and delta buffers (batch-first)."""
        n = self.be.bsz
        self.outputs = self.be.zeros((n,) + self.out_shape)
        if self.needs_deltas:
            self.deltas = self.be.zeros((n,) + self.in_shape)

    def fprop(self, x, inference=False):
        raise NotImplementedError

    def bprop(self, error):
        raise NotImplementedError

    # ---- parameters ----------------------------------------------------------------------------
    def parameters(self):
        """The learnable :class:`Parameter` objects, in a fixed order."""
        return []

    def param_shapes(self):
        """The shapes of the parameters ``allocate`` will make, known once the layer is
        configured (the memory check counts them before anything is allocated); a layer that
        makes parameters overrides this."""
        return []

    def buffers(self):
        """Non-learned state saved with the parameters (``name -> tensor``), e.g. running means."""
        return {}

    def set_needs_deltas(self, needed):
        """The first layer of a model need not compute the error for its input."""
        self.needs_deltas = needed

    def leaves(self):
        """The non-container layers under this one (itself for a plain layer)."""
        return [self]

    def name_children(self):
        """Containers name their unnamed children; plain layers have none."""

    # ---- description ---------------------------------------------------------------------------
    def get_description(self):
        """``{"type": class name, "config": {argument: value}}`` from the arguments the
        constructor was given (nested layers, initializers and transforms as their own
        descriptions), so ``type(**config)`` rebuilds an equal layer."""
        given = getattr(self, "_given_args", None)
        if given is None:
            raise TypeError(f"layer {self.name!r} ({type(self).__name__}) cannot be described: "
                            f"it was not made by calling its class")
        where = f"layer {self.name or type(self).__name__}"
        return {"type": type(self).__name__, "config": describe_value(given, where)}

    def param_count(self):
        return int(sum(p.value.size for p in self.parameters()))

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r})"


class ParameterLayer(Layer):
    """A layer owning parameters made in ``allocate`` by :meth:`add_param`."""

    def __init__(self, name=None):
        super().__init__(name)
        self._params = []

    def add_param(self, attr, shape, init, fan_in, fan_out, dtype=None):
        """Allocate parameter ``attr`` of ``shape``, filled by initializer ``init``."""
        value = self.be.empty(shape, dtype=dtype)
        value.set(init.generate(self.be.rng, shape, fan_in, fan_out))
        grad = self.be.zeros(shape, dtype=dtype)
        param = Parameter(self, attr, value, grad)
        self._params.append(param)
        return param

    def parameters(self):
        return list(self._params)


def _batch_checked(function, what, shape_attr):
    """``function`` (a layer's fprop or bprop, whose first argument is the batch) preceded by
    :meth:`Layer.check_batch` of that batch against the attribute ``shape_attr``, or by
    :meth:`Layer.not_configured` when that is not set yet.  A layer taking sequences of 1 to
    T steps: fprop's batch may have any of those (and sets the layer's steps to it), bprop's
    error must have the steps of the last fprop."""
    forward = shape_attr == "in_shape"

    @functools.wraps(function)
    def checked(self, batch, *args, **kwargs):
        shape = getattr(self, shape_attr)
        if shape is None:
            raise self.not_configured(function.__name__)
        got = batch.shape
        if self.max_steps is not None and (forward or self.out_stepped):
            if forward:
                if got[1:] != shape or got[0] != self.be.bsz:
                    self.check_batch(batch, shape, what, steps=True)
                if got[1] != self.steps:
                    self.set_steps(got[1])
                return function(self, batch, *args, **kwargs)
            shape = self.steps_shape(shape)
            source = "as the last fprop gave"
            if got[1:] != shape or got[0] != self.be.bsz:
                self.check_batch(batch, shape, what, source)
            return function(self, batch, *args, **kwargs)
        if got[1:] != shape or got[0] != self.be.bsz:
            self.check_batch(batch, shape, what)
        return function(self, batch, *args, **kwargs)
    checked.checked_batch = True
    return checked


def set_chain_steps(layers, steps):
    """Set the steps of a chain of layers, each feeding the next, up to the first whose
    output is no longer a sequence of the same steps (a reduction)."""
    for layer in layers:
        if layer.max_steps is None:
            return
        layer.set_steps(steps)
        if not layer.out_stepped:
            return


def steps_view(be, full, bsz, T, steps):
    """The view of buffer ``full`` for sequences of ``steps`` of its T steps: its first
    ``full.size * steps // T`` elements, contiguous, shaped (bsz, steps, ...) for a buffer
    (bsz, T, ...), (bsz*steps, ...) for one of rows (bsz*T, ...), (rows, steps) for one of
    per-step columns (rows, T) (an attention's log-sum-exp rows per head); kept, as a view
    made once for the layer's life."""
    shape = tuple(full.shape)
    if steps == T:
        return full
    if len(shape) >= 2 and shape[0] == bsz and shape[1] == T:
        new = (bsz, steps) + shape[2:]
    elif shape and shape[0] == bsz * T:
        new = (bsz * steps,) + shape[1:]
    elif len(shape) == 2 and shape[1] == T:
        new = (shape[0], steps)
    else:
        raise ValueError(f"a buffer of shape {shape} is not laid out per step for {bsz} "
                         f"sequences of {T} steps")
    count = prod(new)
    return be.keep(full.reshape(full.size)[:count].reshape(new))


def is_count(value, minimum=1):
    """True for an integer (not a boolean) >= ``minimum``: what sizes (``nout``, filter
    shapes, strides) must be."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
        and value >= minimum


def flat_rows(t, last):
    """View batch-first tensor ``t`` as 2-D (rows, ``last``)."""
    return t.reshape(t.size // last, last)


def add_row_sums(be, ones, rows, grad):
    """grad (n,) += the sums of the rows of ``rows`` (R, n), a bias gradient, as one GEMM:
    ones (1, >= R, every element 1) @ rows accumulated into grad (beta=1), with no temporary
    and no pass of its own.  ``ones`` is made once by the layer (``be.ones((1, R))``) with as
    many columns as its largest ``rows``."""
    count, n = rows.shape
    be.compound_dot(ones if ones.shape[1] == count else ones[:, :count], rows,
                    grad.reshape(1, n), beta=1.0)


def prod(shape):
    return int(np.prod(shape)) if len(shape) else 1
