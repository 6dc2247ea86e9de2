"""The real GPU backend (``backends/gpu*.py``) on a host stand-in for the device, so its Python
glue (kernel choice, argument formats, grids, work tensors, views) runs where no GPU is.

:class:`HostDevice` replaces :class:`~neonlite.backends.gpu.device.Device`: memory is numpy
buffers addressed by their real host addresses, a kernel is compiled by
``cuda_host_emulator`` (hand-written variants from their ``.cu`` source, op-trees from the
generated source) and launched with its parameters packed exactly as pycuda packs them
(``struct.pack`` of the argument format), so a format that does not match the kernel's C
signature gives wrong results here as on a GPU.  :class:`HostBlas` computes cuBLAS's
column-major GEMM with numpy on the same memory.  Streams and events are no-ops (everything is
synchronous).  :func:`host_gpu_backend` builds a ``GPUBackend`` on them.
"""
import ctypes
import struct

import time

import numpy as np
from .cuda_host_emulator import HostModule

from neonlite.backends.gpu import codegen
from neonlite.backends.gpu import backend as gpu_module
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.kernels import specs

_HEADER = (specs.find("pool").root / "cuda" / "neonlite_common.cuh").read_text()


class _Event:
    """Stamped with the host clock when recorded (the emulated stream runs synchronously),
    so ``time_till`` is the host time between two records, in ms, as pycuda's."""
    def record(self, stream=None):
        self.stamp = time.perf_counter()
        return self

    def time_till(self, other):
        return (other.stamp - self.stamp) * 1e3

    def synchronize(self):
        return None


class _Stream:
    handle = 0

    def wait_for_event(self, event):
        return None

    def synchronize(self):
        return None


class _Cuda:
    """The pycuda.driver calls the backend makes, on host memory."""
    Event = _Event

    @staticmethod
    def memcpy_dtoh(buf, ptr):
        ctypes.memmove(buf.ctypes.data, int(ptr), buf.nbytes)

    @staticmethod
    def memcpy_htod(ptr, buf):
        buf = np.ascontiguousarray(buf)
        ctypes.memmove(int(ptr), buf.ctypes.data, buf.nbytes)

    @classmethod
    def memcpy_htod_async(cls, ptr, buf, stream=None):
        cls.memcpy_htod(ptr, buf)

    @staticmethod
    def pagelocked_empty(shape, dtype):
        return np.empty(shape, dtype)


class _Allocation:
    """A 256-byte aligned block of host memory standing for a device allocation."""

    def __init__(self, nbytes):
        self.buf = np.zeros(int(nbytes) + 256, np.uint8)
        self.address = -(-self.buf.ctypes.data // 256) * 256

    def __int__(self):
        return self.address


class _Function:
    def __init__(self, module, name):
        self.module, self.name, self.arg_format = module, name, None

    def prepare(self, arg_format):
        self.arg_format = arg_format


def _variant_sources(spec):
    sources = [spec.source_path.read_text()]
    folder = spec.source_path.parent
    for line in sources[0].splitlines():
        if line.startswith('#include "') and "neonlite_common" not in line:
            sources.insert(0, (folder / line.split('"')[1]).read_text())
    return sources


class HostDevice:
    """Stands for one CUDA device (see the module docstring)."""

    arch = "sm_80"
    name = "host emulator"

    def __init__(self, sm_count=1):
        self.sm_count = sm_count
        self.cuda = _Cuda()
        self.stream, self.copy_stream = _Stream(), _Stream()
        self.allocations = self.allocated_bytes = 0
        self.modules, self.launches = {}, []
        self._keep = []

    def alloc(self, nbytes):
        self.allocations += 1
        self.allocated_bytes += int(nbytes)
        block = _Allocation(max(int(nbytes), 1))
        self._keep.append(block)
        return block

    def function(self, module_key, cubin_fn, name, arg_format):
        kind, key = module_key
        if kind != "variant":
            raise NotImplementedError("op-tree kernels come through HostGPUBackend._compile")
        module = self.modules.get(module_key)
        if module is None:
            spec = specs.find(key)
            module = self.modules[module_key] = HostModule(
                _variant_sources(spec), {f: None for f in spec.functions}, prelude=_HEADER)
        func = _Function(module, name)
        if arg_format is not None:
            func.prepare(arg_format)
        return func

    def source_function(self, name, source):
        module = self.modules.get(("optree", name))
        if module is None:
            body = source.split(codegen.BODY_MARKER, 1)[1]
            module = self.modules[("optree", name)] = HostModule(
                [body], {name: None}, prelude=codegen.common_header())
        return _Function(module, name)

    def launch(self, func, grid, block, args):
        params = struct.pack(func.arg_format, *args)
        self.launches.append(func.name)
        func.module.launch_packed(func.name, grid, block, params)

    def blocks(self, n, threads=256, per_sm=32):
        return max(1, min(-(-int(n) // threads), self.sm_count * per_sm))

    def synchronize(self):
        return None


class HostBlas:
    """cuBLAS's ``gemm`` (column-major, see :meth:`backends.cublas.Cublas.gemm`) in numpy."""

    _DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}

    def __init__(self, stream_handle=0, allow_tf32=False):
        self.calls = 0

    @staticmethod
    def _matrix(ptr, dtype, rows, cols, ld):
        """Column-major rows x cols at ptr with leading dimension ld, as a writable view."""
        item = np.dtype(dtype).itemsize
        size = (cols - 1) * ld + rows if rows and cols else 0
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * max(1, size * item)).from_address(ptr))
        flat = raw[:size * item].view(dtype)
        return np.lib.stride_tricks.as_strided(flat, (rows, cols), (item, ld * item))

    def gemm(self, storage, transa, transb, m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr,
             ldc, batch=1, stride_a=0, stride_b=0, stride_c=0):
        self.calls += 1
        dtype = self._DTYPES[storage]
        item = np.dtype(dtype).itemsize
        for i in range(batch):
            a = self._matrix(a_ptr + i * stride_a * item, dtype, *((k, m) if transa else (m, k)),
                             lda)
            b = self._matrix(b_ptr + i * stride_b * item, dtype, *((n, k) if transb else (k, n)),
                             ldb)
            c = self._matrix(c_ptr + i * stride_c * item, dtype, m, n, ldc)
            load = (lambda x: bf16_to_f32(np.ascontiguousarray(x))) if storage == "bf16" else \
                (lambda x: x.astype(np.float64))
            result = alpha * (load(a).T if transa else load(a)) @ (load(b).T if transb else load(b))
            if beta != 0.0:
                result = result + beta * load(c)
            c[...] = f32_to_bf16(result.astype(np.float32)) if storage == "bf16" else result


class HostGPUBackend(gpu_module.GPUBackend):
    """``GPUBackend`` whose op-tree kernels are compiled for the host emulator."""

    def _compile(self, name, source):
        return self.device.source_function(name, source)


def host_gpu_backend(monkeypatch, batch_size=4, seed=0, dtype=np.float32):
    """A :class:`HostGPUBackend` on a fresh :class:`HostDevice` (made the current backend)."""
    import neonlite
    device = HostDevice()
    monkeypatch.setattr(gpu_module, "get_device", lambda device_id: device)
    monkeypatch.setattr(gpu_module.cublas, "Cublas", HostBlas)
    be = HostGPUBackend(batch_size, seed, dtype)
    neonlite.backends._current = be
    return be
