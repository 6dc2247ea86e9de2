"""The backend methods of the op table's dispatched rows (those with a ``kernel``), made from
the rows: :class:`TableOps`, a base of :class:`~neonlite.backends.backend.Backend`, has one
method per such row.  A call binds its arguments by the row's operands and scalars (their
defaults filled in), runs the row's operand check, then hands the operands (None for an
absent optional one) and the scalars, in row order, to the backend's ``run_op``."""
import inspect
from abc import ABC, abstractmethod

from . import OPS


def _signature(op):
    """self, the operands (an optional one given positionally may be None), the scalars (those
    with a default after those without), then the ``trailing`` operands, None by default (a
    residual and the sum it makes, say)."""
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params += [P(o.name, P.POSITIONAL_OR_KEYWORD) for o in op.operands if not o.trailing]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD) for s in op.scalars if s.default is None]
    params += [P(s.name, P.POSITIONAL_OR_KEYWORD, default=s.default) for s in op.scalars
               if s.default is not None]
    params += [P(o.name, P.POSITIONAL_OR_KEYWORD, default=None) for o in op.operands
               if o.trailing]
    return inspect.Signature(params)


def table_method(op):
    """The backend method of dispatched row ``op`` (see the module docstring)."""
    signature = _signature(op)

    def method(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        operands = {o.name: values[o.name] for o in op.operands}
        for o in op.operands:
            if o.pair is not None and (operands[o.name] is None) != (operands[o.pair] is None):
                raise ValueError(f"{op.name}: {o.name} and {o.pair} are given together or "
                                 f"not at all")
        if op.check is not None:
            op.check(op.name, **operands)
        self.run_op(op, tuple(operands.values()), tuple(values[s.name] for s in op.scalars))

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
        row's order, after the row's operand check has passed."""


for _op in OPS.values():
    if _op.dispatched:
        setattr(TableOps, _op.name, table_method(_op))
