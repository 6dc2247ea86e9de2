"""neonlite: graph-free layers with explicit fprop/bprop on swappable CPU/GPU backends.

Quick start::

    from neonlite import gen_backend, Model
    be = gen_backend("cpu", batch_size=128, rng_seed=0)
"""
from .backends import gen_backend, get_backend, available_backends, BackendUnavailable
from .model import Model
from .profiler import profile
from .version import __version__
__all__ = ["gen_backend", "get_backend", "available_backends", "BackendUnavailable", "Model",
           "profile"]
