"""The layer lifecycle shared by every layer.

``configure(in_shape) -> out_shape`` (shapes exclude the batch axis and are checked here),
``allocate()`` (output and delta buffers, once), ``fprop(x, inference=False) -> output``, and
``bprop(error) -> error for the layer below``, which *accumulates* parameter gradients into
``Parameter.grad`` (the model zeroes them at the start of each step).  Activations are
batch-first; images NHWC, sequences (N, T, D).

Every layer's ``fprop`` and ``bprop`` check the batch they are given against the configured
shapes before they run (:meth:`Layer.__init_subclass__`), called directly or from a container:
the buffers made at ``allocate`` and the kernels writing them take nothing else.
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

    # ---- lifecycle ---------------------------------------------------------------------------
    def configure(self, in_shape, prev_name=None):
        """Check ``in_shape`` (one example's shape, no batch axis) and return the output shape."""
        self.be = get_backend()
        self.in_shape = tuple(int(s) for s in in_shape)
        self.prev_name = prev_name
        self.out_shape = tuple(int(s) for s in self._configure(self.in_shape))
        return self.out_shape

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

    def check_batch(self, t, shape, what, source="as configured"):
        """Raise :class:`ShapeError` unless tensor ``t`` is a batch of the backend's size of
        examples of ``shape`` (with ``variable_steps``, sequences (T, ...) may be shorter: 1
        to T steps): the buffers made at ``allocate`` (and the kernels writing them) take
        nothing else.  ``source``: where ``shape`` comes from, for the message."""
        expected = (self.be.bsz,) + tuple(shape)
        got = tuple(t.shape)
        if got == expected:
            return
        steps = self.variable_steps and len(expected) >= 3
        if steps and len(got) == len(expected) and got[0] == expected[0] and \
                got[2:] == expected[2:] and 1 <= got[1] <= expected[1]:
            return
        where = f"layer '{self.name}' ({type(self).__name__})" if self.name else \
            self.unnamed_description or f"the {type(self).__name__} layer"
        examples = f"sequences of 1 to {shape[0]} steps of shape {tuple(shape[1:])}" if steps \
            else f"examples of shape {tuple(shape)}"
        raise ShapeError(f"{where}: the {what} has shape {got}; expected {expected} (a batch "
                         f"of {self.be.bsz} {examples}, {source})")

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
    # ---- incremental decoding (``layers/decode.py``) ------------------------------------------
    def init_decode(self, batch, max_len):
        """This layer's ``DecodeState`` for ``batch`` sequences of up to ``max_len`` positions;
        a layer without an incremental path has none (``TypeError``)."""
        raise TypeError(f"layer '{self.name}' ({type(self).__name__}) has no incremental "
                        f"decoding path; decoding supports Embedding, PositionalEmbedding, "
                        f"LayerNorm, MultiHeadAttention, TransformerBlock, Linear, Bias, "
                        f"Activation, Dropout and containers of them")

    def decode(self, x, state):
        """Run the layer on the new position ``x`` (B, 1, ...) with the ``state`` of
        :meth:`init_decode`; returns its output (B, 1, ...)."""
        raise TypeError(f"layer '{self.name}' ({type(self).__name__}) has no incremental "
                        f"decoding path")

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
    :meth:`Layer.not_configured` when that is not set yet."""
    @functools.wraps(function)
    def checked(self, batch, *args, **kwargs):
        shape = getattr(self, shape_attr)
        if shape is None:
            raise self.not_configured(function.__name__)
        got = batch.shape
        if got[1:] != shape or got[0] != self.be.bsz:
            self.check_batch(batch, shape, what)
        return function(self, batch, *args, **kwargs)
    checked.checked_batch = True
    return checked


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
