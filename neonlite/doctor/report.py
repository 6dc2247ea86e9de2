"""The rows of ``neonlite doctor``'s table and how they print.

A :class:`Row` is one thing checked: its name, a status, what was found, and (unless it is
``ok``) what to do about it.  Statuses:

* ``ok``: works;
* ``warn``: works, but slower or with something missing that a user may want;
* ``FAIL``: does not work here;
* ``--``: absent, and not needed by the backend asked about.
"""
from dataclasses import dataclass

OK, WARN, FAIL, ABSENT = "ok", "warn", "FAIL", "--"
NAME_WIDTH = 14


@dataclass(frozen=True)
class Row:
    name: str
    status: str
    found: str
    fix: str = ""


def format_table(rows):
    """The table as text: one line per row, the fix (when any) indented under it."""
    lines = []
    for row in rows:
        lines.append(f"{row.status:<5} {row.name:<{NAME_WIDTH}} {row.found}")
        if row.fix and row.status != OK:
            lines.append(f"{'':<5} {'':<{NAME_WIDTH}} -> {row.fix}")
    return "\n".join(lines)


def one_line(text):
    """``text`` (an error message) as one line."""
    return " ".join(str(text).split())
