"""Turning objects into the plain values of the ``{type, config}`` schema (YAML-ready)."""
import functools
import inspect
import os

import numpy as np

from .errors import short_repr


def describe_value(value, where="value"):
    """``value`` as YAML-ready data: numbers, strings, booleans, None, lists and mappings as
    themselves (tuples become lists, numpy scalars and arrays plain Python, paths strings), and
    any object with ``get_description()`` as its ``{type, config}`` mapping (recursively).

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
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [describe_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): describe_value(v, f"{where}.{k}") for k, v in value.items()}
    if hasattr(value, "get_description"):
        return describe_value(value.get_description(), where)
    raise TypeError(f"{where}: cannot describe a {type(value).__name__} ({short_repr(value)}); a "
                    f"description holds numbers, strings, lists, mappings and neonlite objects "
                    f"that have get_description()")


@functools.lru_cache(maxsize=None)
def _init_signature(cls):
    """(signature of ``cls.__init__`` without ``self``, name of its ``**kwargs`` or None)."""
    sig = inspect.signature(cls.__init__)
    params = list(sig.parameters.values())[1:]
    var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
    return sig.replace(parameters=params), var_kw


def given_arguments(cls, args, kwargs):
    """The arguments of a ``cls(*args, **kwargs)`` call as ``{name: value}`` (``**kwargs``
    merged in), or None when they do not bind (the constructor then raises its own
    TypeError).  Classes call this from ``__new__`` to describe themselves later."""
    sig, var_kw = _init_signature(cls)
    try:
        bound = sig.bind(*args, **kwargs).arguments
    except TypeError:
        return None
    given = dict(bound)
    if var_kw is not None:
        given.update(given.pop(var_kw, {}))
    return given
