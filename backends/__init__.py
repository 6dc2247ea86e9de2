"""Backends and the registry behind ``gen_backend`` and the CLI's ``-b`` flag.

A backend is registered by name with a factory; the factory runs (and so a GPU is probed for)
only when that backend is asked for, never at import.  The one piece of global state in
neonlite is the current backend, set by :func:`gen_backend` and read by :func:`get_backend`.
"""
import importlib

import numpy as np

from .backend import Backend, Tensor
from .half_precision import CPU_F16_SLOWDOWN
from .optree import OpNode
from .unavailable import BackendUnavailable

_REGISTRY = {}
_current = None


def register_backend(name, module, cls_name):
    """Register backend ``name`` as class ``cls_name`` in module ``module`` (imported lazily)."""
    _REGISTRY[name] = (module, cls_name)


def available_backends():
    """Names of the registered backends (the choices of ``-b``)."""
    return list(_REGISTRY)


def gen_backend(backend="cpu", batch_size=128, rng_seed=None, datatype=np.float32, device_id=0,
                **options):
    """Make backend ``backend`` the current one and return it.

    ``options`` go to the backend's class: the cpu backend's ``numpy_float16=True`` asks for
    numpy's float16 (the slow numpy reference of mixed precision, which the cpu backend
    otherwise refuses: about ``CPU_F16_SLOWDOWN`` times slower than float32).

    Raises ``ValueError`` for a name that is not registered and :class:`BackendUnavailable`
    (with the reason: no pycuda, no device, ...) for one that cannot run on this machine.
    """
    global _current
    if backend not in _REGISTRY:
        raise ValueError(f"unknown backend {backend!r}; registered backends: "
                         f"{', '.join(available_backends())}")
    module, cls_name = _REGISTRY[backend]
    try:
        cls = getattr(importlib.import_module(module, __name__), cls_name)
    except ImportError as err:
        raise BackendUnavailable(f"backend {backend!r} is not available: {err}") from err
    _current = cls(batch_size=batch_size, rng_seed=rng_seed, datatype=datatype,
                   device_id=device_id, **options)
    return _current


def get_backend():
    """The current backend (made by the last :func:`gen_backend`)."""
    if _current is None:
        raise RuntimeError("no backend yet: call neonlite.gen_backend(...) first")
    return _current


register_backend("cpu", ".cpu.backend", "CPUBackend")
register_backend("gpu", ".gpu.backend", "GPUBackend")

__all__ = ["Backend", "Tensor", "OpNode", "BackendUnavailable", "gen_backend", "get_backend",
           "register_backend", "available_backends", "CPU_F16_SLOWDOWN"]
