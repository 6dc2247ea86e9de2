"""The GPU backend (registered as ``gpu``): pycuda device memory, CUDA kernels (built by nvcc,
or generated for op-trees), cuBLAS.  ``backend.py`` holds :class:`GPUBackend`; each other module
holds one section of the backend contract, named as in ``backends/reference/`` and
``backends/cpu/``.  Nothing here imports pycuda until the backend is made."""
