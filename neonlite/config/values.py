"""Turning objects into the plain values of the ``{type, config}`` schema (YAML-ready)."""
import numpy as np


def describe_value(value, where="value"):
    """``value`` as YAML-ready data: numbers, strings, booleans, None, lists and mappings as
    themselves (tuples become lists, numpy scalars and arrays plain Python), and any object
    with ``get_description()`` as its ``{type, config}`` mapping (recursively).

    Raises ``TypeError`` naming ``where`` for anything else (a lambda, an open file, ...).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [describe_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): describe_value(v, f"{where}.{k}") for k, v in value.items()}
    if hasattr(value, "get_description"):
        return describe_value(value.get_description(), where)
    raise TypeError(f"{where}: cannot describe a {type(value).__name__} ({value!r}); a "
                    f"description holds numbers, strings, lists, mappings and neonlite objects "
                    f"that have get_description()")
