"""Calls the CPU backend prepares once and keeps by their arrays' identities (GEMMs, the row
kernels, the attention op): :class:`KeptCalls`."""
import weakref

#: what a row's name gets to key its kept call on bfloat16 operands (``KernelModules.
#: run_bf16_op``), apart from its float call on the same arrays
BF16_CALL = ":bf16"


class KeptCalls:
    """A table of prepared calls, each kept under a key that holds its arrays' ``id``\\ s, with
    weak references to those arrays so it keeps no memory alive: :meth:`find` gives a call
    back only while every array it was prepared for is alive and is the one given (its
    pointers are theirs).  At ``limit`` entries, :meth:`keep` first drops the entries whose
    arrays are gone, and every entry if none is."""

    def __init__(self, limit):
        self.limit = limit
        self._table = {}

    def __len__(self):
        return len(self._table)

    def clear(self):
        """Forget every kept call (they are prepared again on their next use)."""
        self._table.clear()

    def find(self, key, arrays):
        """The value kept under ``key`` for these same living ``arrays`` (None entries
        aside), or None."""
        found = self._table.get(key)
        if found is None:
            return None
        refs, value = found
        for ref, array in zip(refs, arrays):
            if ref is not None and ref() is not array:
                return None
        return value

    def keep(self, key, arrays, value):
        """Keep ``value`` (the call prepared for ``arrays``) under ``key``."""
        table = self._table
        if len(table) >= self.limit:
            for gone in [k for k, (refs, _) in table.items()
                         if any(r is not None and r() is None for r in refs)]:
                del table[gone]
            if len(table) >= self.limit:
                table.clear()
        table[key] = (tuple(None if a is None else weakref.ref(a) for a in arrays), value)
