"""Kernel sources and the one build system that compiles them.

* ``cpu/*.c`` (C + OpenMP, called through cffi) and ``cuda/*.cu`` are the sources;
* ``specs.py`` is the one table of their variants (:class:`~.kernel_spec.KernelSpec`; the CUDA
  rows are listed in ``cuda_specs.py``) and its one ``find``;
* ``build.py`` compiles a variant into the cache of ``cache.py``, with the compilers of
  ``toolchain.py``; ``first_use.py`` builds what is missing before training starts.  The
  command ``neonlite kernels build|list|clean`` is ``neonlite/cli/kernels.py``.
"""
