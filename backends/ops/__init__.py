"""The op table: every backend op described once (``table.py``: the row type; one row module
per family).  :data:`OPS` maps an op's name to its :class:`~.table.Op`; the backends
dispatch the rows with a kernel from it (``dispatch.py``), the profiler reads its costs, and
the per-op tests (``tests/backend/test_op_table.py``) run every row."""
from . import blocksparse, elementwise, linear, norm, recurrent, softmax
from .table import GRIDS, SCALAR_KINDS, Kernel, Launch, Op, Operand, Scalar

#: the row modules, in the order the docs list them
FAMILIES = (linear, norm, softmax, elementwise, blocksparse, recurrent)
#: op name -> its row
OPS = {op.name: op for family in FAMILIES for op in family.ROWS}


def find(name):
    """The row of op ``name``; KeyError naming the known ops."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no op {name!r} in the op table; known: {', '.join(OPS)}") from None


def markdown_list():
    """The op list of ``docs/backends.md``: one line per family, its ops in row order (a
    dispatched row's name in bold)."""
    lines = []
    for family in FAMILIES:
        names = [f"**`{op.name}`**" if op.dispatched else f"`{op.name}`" for op in family.ROWS]
        lines.append(f"- `ops/{family.__name__.rsplit('.', 1)[-1]}.py`: {', '.join(names)}\n")
    return "".join(lines)


__all__ = ["OPS", "FAMILIES", "find", "markdown_list", "Op", "Operand", "Scalar", "Kernel",
           "Launch", "GRIDS", "SCALAR_KINDS"]
