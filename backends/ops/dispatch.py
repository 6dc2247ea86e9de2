"""The backend methods of the op table's dispatched rows (those with a ``kernel``), made from
the rows (a row's ``returns`` operand is the method's result): :class:`TableOps`, a base of
:class:`~neonlite.backends.backend.Backend`, has one method per such row.  A call binds its
arguments by the row's operands and scalars (their defaults filled in) and hands the
operands (None for an absent optional one) and the scalars, in row order, to the backend's
``run_op``, which runs the row's operand check (``Op.check_operands``) before any kernel."""
import inspect
from abc import ABC, abstractmethod
from operator import itemgetter

from . import OPS


def _signature(op):
    """self, the operands (an optional one may be given as None; None by default when every
    parameter after it has a default: a trailing mask), the scalars (those with a default
    after those without), then the ``trailing`` operands, None by default (a residual and the
    sum it makes, say), then the ``trailing`` scalars."""
    P = inspect.Parameter
    leading = [o for o in op.operands if not o.trailing]
    defaulted = len(leading)
    if all(s.default is not None for s in op.scalars):
        while defaulted and leading[defaulted - 1].optional:
            defaulted -= 1
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params += [P(o.name, P.POSITIONAL_OR_KEYWORD) if i < defaulted else
               P(o.name, P.POSITIONAL_OR_KEYWORD, default=None) for i, o in enumerate(leading)]
    leading_scalars = [s for s in op.scalars if not s.trailing]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD) for s in leading_scalars if s.default is None]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD, default=s.default) for s in leading_scalars
               if s.default is not None]
    params += [P(o.name, P.POSITIONAL_OR_KEYWORD, default=None) for o in op.operands
               if o.trailing]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD, default=s.default) for s in op.scalars
               if s.trailing]
    return inspect.Signature(params)


def _picker(positions):
    """A function giving the tuple of the items of a sequence at ``positions``."""
    positions = tuple(positions)
    if len(positions) == 1:
        at = positions[0]
        return lambda values: (values[at],)
    return itemgetter(*positions) if positions else lambda values: ()


def table_method(op):
    """The backend method of dispatched row ``op`` (see the module docstring).  Arguments are
    bound by a table made once from the row's signature (``inspect``'s binding costs more
    than a small kernel): a positional call, the common one, fills the omitted parameters'
    defaults from a tuple and picks the operands and scalars by position.  It returns the
    row's ``returns`` operand (None when the row names none)."""
    signature = _signature(op)
    names = tuple(signature.parameters)[1:]
    empty = inspect.Parameter.empty
    defaults = {n: p.default for n, p in signature.parameters.items() if p.default is not empty}
    tail = tuple(defaults.get(n, empty) for n in names)
    required = len(names) - len(defaults)  # Python's rule: the defaults are a suffix
    operands_of = _picker(names.index(o.name) for o in op.operands)
    scalars_of = _picker(names.index(s.name) for s in op.scalars)
    returned = names.index(op.returns) if op.returns is not None else None

    def method(self, *args, **kwargs):
        given = len(args)
        if kwargs or given > len(names):
            if given > len(names) or any(n not in names[given:] for n in kwargs):
                signature.bind(self, *args, **kwargs)  # the TypeError Python would raise
            values = dict(defaults)
            values.update(zip(names, args))
            values.update(kwargs)
            if len(values) < len(names):
                signature.bind(self, *args, **kwargs)  # a missing argument's TypeError
            args = tuple(values[n] for n in names)
        elif given < len(names):
            if given < required:
                signature.bind(self, *args)  # a missing argument's TypeError
            args = args + tail[given:]
        self.run_op(op, operands_of(args), scalars_of(args))
        return None if returned is None else args[returned]

    method.__name__ = method.__qualname__ = op.name
    method.__doc__ = op.doc
    method.__signature__ = signature
    return method


class TableOps(ABC):
    """One method per dispatched row of the op table (see the module docstring); a backend
    implements :meth:`run_op`."""

    @abstractmethod
    def run_op(self, op, operands, scalars):
        """Run dispatched row ``op`` (an :class:`~neonlite.backends.ops.table.Op`) on
        ``operands`` (tensors, None for an absent optional one) and ``scalars``, both in the
        row's order; ``op.check_operands`` first (a backend may skip it for a call it has
        kept, on the same arrays, after it passed)."""


for _op in OPS.values():
    if _op.dispatched:
        setattr(TableOps, _op.name, table_method(_op))
