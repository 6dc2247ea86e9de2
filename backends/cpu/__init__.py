"""The CPU backend (registered as ``cpu``): numpy arrays, C kernels built through cffi, MKL's
or numpy's BLAS.  ``backend.py`` holds :class:`CPUBackend`; each other module holds one section
of the backend contract, named as in ``backends/reference/`` and ``backends/gpu/``."""
