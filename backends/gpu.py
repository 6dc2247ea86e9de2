"""The GPU backend entry point (pycuda + CUDA kernels + cuBLAS).

Importing this module probes for pycuda and a CUDA device and raises ``ImportError`` with the
reason when either is missing; :func:`neonlite.backends.gen_backend` turns that into a
``BackendUnavailable`` error that names the cause.
"""
try:
    import pycuda.driver as _cuda
except ImportError as err:
    raise ImportError("pycuda is not installed (pip install 'neonlite[gpu]' on a machine with "
                      "CUDA)") from err

try:
    _cuda.init()
    _count = _cuda.Device.count()
except _cuda.Error as err:
    raise ImportError(f"CUDA could not start: {err}") from err
if _count == 0:
    raise ImportError("pycuda found no CUDA device on this machine")

raise ImportError("the GPU backend's kernels are not built into this version yet")
