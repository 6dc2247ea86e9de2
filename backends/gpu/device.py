"""The CUDA device under the GPU backend: context, streams, memory pool, kernel modules.

A :class:`Device` retains the device's *primary* context and pushes it (never
``pycuda.autoinit``), allocates from a ``pycuda.tools.DeviceMemoryPool`` while counting every
allocation (so a test can check that a training step after the first allocates nothing), and
loads cubins with ``module_from_buffer``.  :func:`get_device` keeps one Device per device id for
the process: a CUDA context belongs to the process, and every backend made on that device shares
it, its pool and its loaded kernels.  At exit (``atexit``) the device synchronizes, the pool
stops holding and frees its blocks, and the context is popped, so no "context
stack was not empty" abort happens.

Everything that can fail because of the machine (no pycuda, no device, a driver older than the
nvcc that builds the kernels) raises :class:`~neonlite.backends.BackendUnavailable` with one
line that says which.
"""
import atexit
import re

from ..unavailable import BackendUnavailable
from ...kernels.toolchain import CompilerNotFound, find_nvcc

_DEVICES = {}


def _import_pycuda():
    try:
        import pycuda.driver as cuda
        import pycuda.tools as tools
    except ImportError as err:
        raise BackendUnavailable(f"pycuda is not installed or cannot load libcuda ({err}); "
                                 f"install it with pip install 'neonlite[gpu]' on a machine "
                                 f"with an NVIDIA driver") from err
    return cuda, tools


def _version_number(text):
    """'release 13.0, V13.0.88' -> 13000 (CUDA's MAJOR*1000 + MINOR*10)."""
    found = re.search(r"release (\d+)\.(\d+)", text)
    return int(found.group(1)) * 1000 + int(found.group(2)) * 10 if found else None


class Device:
    """One CUDA device (see the module docstring).  ``stream`` runs all compute;
    ``copy_stream`` runs host-to-device copies of the next batch."""

    def __init__(self, device_id):
        cuda, tools = _import_pycuda()
        self.cuda = cuda
        try:
            cuda.init()
            count = cuda.Device.count()
        except cuda.Error as err:
            raise BackendUnavailable(f"the CUDA driver could not start: {err}") from err
        if count == 0:
            raise BackendUnavailable("pycuda found no CUDA device on this machine")
        if not 0 <= device_id < count:
            raise BackendUnavailable(f"device_id {device_id} does not exist: this machine has "
                                     f"{count} CUDA device(s), 0..{count - 1}")
        try:
            nvcc = find_nvcc()
        except CompilerNotFound as err:
            raise BackendUnavailable(f"the GPU kernels are compiled at run time and {err}") from err
        driver, needed = cuda.get_driver_version(), _version_number(nvcc.version)
        if needed is not None and driver < needed:
            raise BackendUnavailable(f"the CUDA driver supports CUDA {driver // 1000}."
                                     f"{driver % 1000 // 10} but the kernels are built by nvcc "
                                     f"{nvcc.version!r}: update the driver or point "
                                     f"NEONLITE_NVCC at an older nvcc")
        self.device_id = device_id
        self.device = cuda.Device(device_id)
        self.name = self.device.name()
        major, minor = self.device.compute_capability()
        self.arch = f"sm_{major}{minor}"
        self.sm_count = self.device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
        self.context = self.device.retain_primary_context()
        self.context.push()
        self.pool = tools.DeviceMemoryPool()
        self.stream = cuda.Stream()
        self.copy_stream = cuda.Stream()
        self.allocations = 0
        self.allocated_bytes = 0
        self.modules = {}
        self.kernels = {}
        self.closed = False
        atexit.register(self.close)

    def alloc(self, nbytes):
        """A pooled device allocation of at least ``nbytes`` (counted)."""
        self.allocations += 1
        self.allocated_bytes += int(nbytes)
        return self.pool.allocate(max(int(nbytes), 1))

    def function(self, module_key, cubin_fn, name, arg_format):
        """Kernel ``name`` of the module ``cubin_fn()`` builds (loaded once per key), prepared
        with pycuda's struct ``arg_format`` (None: the caller prepares it)."""
        key = (module_key, name)
        func = self.kernels.get(key)
        if func is None:
            module = self.modules.get(module_key)
            if module is None:
                module = self.cuda.module_from_buffer(cubin_fn())
                self.modules[module_key] = module
            func = module.get_function(name)
            if arg_format is not None:
                func.prepare(arg_format)
            self.kernels[key] = func
        return func

    def launch(self, func, grid, block, args):
        func.prepared_async_call(tuple(grid), tuple(block), self.stream, *args)

    def blocks(self, n, threads=256, per_sm=32):
        """Grid size of a grid-stride kernel over n items."""
        return max(1, min(-(-int(n) // threads), self.sm_count * per_sm))

    def synchronize(self):
        self.stream.synchronize()

    def close(self):
        """Free everything and release the context (idempotent; also runs at exit)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.context.synchronize()
        finally:
            self.kernels.clear()
            self.modules.clear()
            self.pool.stop_holding()
            self.pool.free_held()
            self.context.pop()
            _DEVICES.pop(self.device_id, None)


def get_device(device_id):
    """The process's :class:`Device` for ``device_id`` (made on first use)."""
    device = _DEVICES.get(device_id)
    if device is None or device.closed:
        device = _DEVICES[device_id] = Device(device_id)
    return device
