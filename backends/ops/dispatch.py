"""The backend methods of the op table's dispatched rows (those with a ``kernel``), made from
the rows: :class:`TableOps`, a base of :class:`~neonlite.backends.backend.Backend`, has one
method per such row.  A call binds its arguments by the row's operands and scalars (their
defaults filled in) and hands the operands (None for an absent optional one) and the
scalars, in row order, to the backend's ``run_op``, which runs the row's operand check
(``Op.check_operands``) before any kernel."""
import inspect
from abc import ABC, abstractmethod

from . import OPS


def _signature(op):
    """self, the operands (an optional one may be given as None; None by default when every
    parameter after it has a default: a trailing mask), the scalars (those with a default
    after those without), then the ``trailing`` operands, None by default (a residual and the
    sum it makes, say)."""
    P = inspect.Parameter
    leading = [o for o in op.operands if not o.trailing]
    defaulted = len(leading)
    if all(s.default is not None for s in op.scalars):
        while defaulted and leading[defaulted - 1].optional:
            defaulted -= 1
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params += [P(o.name, P.POSITIONAL_OR_KEYWORD) if i < defaulted else
               P(o.name, P.POSITIONAL_OR_KEYWORD, default=None) for i, o in enumerate(leading)]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD) for s in op.scalars if s.default is None]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD, default=s.default) for s in op.scalars
               if s.default is not None]
    params += [P(o.name, P.POSITIONAL_OR_KEYWORD, default=None) for o in op.operands
               if o.trailing]
    return inspect.Signature(params)


def table_method(op):
    """The backend method of dispatched row ``op`` (see the module docstring).  Arguments are
    bound by a table made once from the row's signature (``inspect``'s binding costs more
    than a small kernel)."""
    signature = _signature(op)
    names = tuple(signature.parameters)[1:]
    defaults = {n: p.default for n, p in signature.parameters.items()
                if p.default is not inspect.Parameter.empty}
    operand_names = tuple(o.name for o in op.operands)
    scalar_names = tuple(s.name for s in op.scalars)

    def method(self, *args, **kwargs):
        if len(args) > len(names) or any(n not in names[len(args):] for n in kwargs):
            signature.bind(self, *args, **kwargs)  # the TypeError Python would raise
        values = dict(defaults)
        values.update(zip(names, args))
        values.update(kwargs)
        if len(values) < len(names):
            signature.bind(self, *args, **kwargs)  # a missing argument's TypeError
        self.run_op(op, tuple(values[n] for n in operand_names),
                    tuple(values[n] for n in scalar_names))

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
