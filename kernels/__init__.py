"""Kernel sources and the one build system that compiles them.

* ``cpu/*.c`` (C + OpenMP, called through cffi) and ``cuda/*.cu`` are the sources;
* ``specs.py`` (and the GPU backend's ``cuda_specs.py``) is the table of their variants;
* ``build.py`` compiles a variant into the cache of ``cache.py``, with the compilers of
  ``toolchain.py``; ``cli.py`` is ``neonlite kernels build|list|clean``.
"""
