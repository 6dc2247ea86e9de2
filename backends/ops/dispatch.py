"""The backend methods of the op table's dispatched rows (those with a ``kernel``), made from
the rows: :class:`TableOps`, a base of :class:`~neonlite.backends.backend.Backend`, has one
method per such row.  A call binds its arguments by the row's operands and scalars (their
defaults filled in, by Python itself: the method is compiled from the row's signature) and
hands the operands (None for an absent optional one) and the scalars, in row order, to the
backend's ``run_op``, which runs the row's operand check (``Op.check_operands``) before any
kernel; the method returns the row's ``returns`` operand (None when it names none).

The naming rule of what the table does not make (``backends/cpu/<family>.py``,
``backends/gpu/<family>.py``, named as the row module or the contract section): a class
``CPU<Family>Ops`` / ``GPU<Family>Ops`` holds the contract methods whose backends make a real
choice (an algorithm, a tile, a plan, a work array, a kept call), mixed into the backend; a
class ``CPU<Family>Plan`` / ``GPU<Family>Plan`` is a plan a ``*_layer`` method makes; helpers
are module functions.  No ``...Kernels`` or ``...Mixin`` classes: the CPU backend reaches its
C kernels one way, through ``backend.kernels`` (``KernelModules.module``, ``usable``,
``run_call``, ``run_op``), the GPU backend through ``kernel`` and ``device.launch``; no class
reaches into another's private attributes."""
import inspect
import keyword
from abc import ABC, abstractmethod

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


def table_method(op):
    """The backend method of dispatched row ``op`` (see the module docstring): a Python
    function written from the row's signature, so Python binds its arguments (and raises its
    own TypeError for a missing, extra or unknown one) at the cost of a written method;
    ``inspect``'s binding, or a table of our own, cost more than a small kernel (a GEMM's or
    a gate step's).  It returns the row's ``returns`` operand (None when the row names none).
    A row's operand or scalar name that is no Python identifier is a ValueError."""
    signature = _signature(op)
    names = tuple(signature.parameters)
    for name in names:
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            raise ValueError(f"op {op.name}: {name!r} cannot name a method's parameter")
    empty = inspect.Parameter.empty
    defaults = {f"_default_{n}": p.default for n, p in signature.parameters.items()
                if p.default is not empty}
    params = ", ".join(n if f"_default_{n}" not in defaults else f"{n}=_default_{n}"
                       for n in names)
    operands = "".join(f"{o.name}, " for o in op.operands)
    scalars = "".join(f"{s.name}, " for s in op.scalars)
    source = (f"def {op.name}({params}):\n"
              f"    self.run_op(_op, ({operands}), ({scalars}))\n"
              f"    return {op.returns}\n")
    namespace = {"_op": op, **defaults}
    exec(compile(source, f"<op table: {op.name}>", "exec"), namespace)  # noqa: S102
    method = namespace[op.name]
    method.__qualname__, method.__module__ = op.name, __name__
    method.__doc__ = op.doc
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
