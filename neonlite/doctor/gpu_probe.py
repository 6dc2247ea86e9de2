"""Probe pycuda, the CUDA driver and its devices, and the GPU backend, in a child process.

``neonlite doctor`` runs ``python -m neonlite.doctor.gpu_probe`` with a time limit, so a driver
that hangs or crashes the process costs a row, never the doctor.  The child prints one JSON
object::

    {"pycuda": "2024.1" | null, "pycuda_error": str, "pycuda_cuda": [major, minor, patch],
     "driver": int (CUDA's MAJOR*1000 + MINOR*10) | null, "driver_error": str,
     "devices": [{"name", "cc": "8.0", "arch": "sm_80", "memory_gib"}],
     "backend_error": str | null (null: gen_backend("gpu") works)}
"""
import json
import sys


def _first_line(err):
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def probe():
    found = {"pycuda": None, "driver": None, "devices": [], "backend_error": None}
    try:
        import pycuda
        import pycuda.driver as cuda
    except Exception as err:  # an ImportError, or a libcuda that fails to load
        found["pycuda_error"] = _first_line(err)
        return found
    found["pycuda"] = getattr(pycuda, "VERSION_TEXT", "?")
    try:
        found["pycuda_cuda"] = list(cuda.get_version())
        cuda.init()
        found["driver"] = int(cuda.get_driver_version())
        for i in range(cuda.Device.count()):
            device = cuda.Device(i)
            major, minor = device.compute_capability()
            found["devices"].append({"name": device.name(), "cc": f"{major}.{minor}",
                                     "arch": f"sm_{major}{minor}",
                                     "memory_gib": round(device.total_memory() / 2**30, 1)})
    except Exception as err:
        found["driver_error"] = _first_line(err)
        return found
    try:
        import neonlite
        neonlite.gen_backend("gpu", batch_size=1)
    except Exception as err:
        found["backend_error"] = " ".join(str(err).split()) or type(err).__name__
    return found


if __name__ == "__main__":
    json.dump(probe(), sys.stdout)
    sys.stdout.flush()
