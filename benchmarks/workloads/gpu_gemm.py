"""GPU GEMM 8192 x 8192 x 8192 in bfloat16 (tensor cores, fp32 accumulation) and float32
(no TF32), neonlite's cuBLAS call against ``torch.matmul`` on the same device.
Figure: GFLOP/s (2*M*N*K per call).  GPU only (``--backend gpu``)."""
import numpy as np

FIGURE = "GFLOP/s"


def _size(smoke):
    return 256 if smoke else 8192


def _make(dtype_name):
    def neonlite(make_backend, smoke):
        n = _size(smoke)
        be = make_backend(n)
        rng = np.random.default_rng(0)
        storage = "bf16" if dtype_name == "bf16" else np.float32
        a = be.array(rng.random((n, n), dtype=np.float32) - 0.5, dtype=storage)
        b = be.array(rng.random((n, n), dtype=np.float32) - 0.5, dtype=storage)
        c = be.empty((n, n), dtype=storage)
        return (lambda: be.compound_dot(a, b, c)), 2.0 * n ** 3 / 1e9

    def torch(device, smoke):
        import torch
        n = _size(smoke)
        torch.backends.cuda.matmul.allow_tf32 = False
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        a = torch.rand(n, n, device=device, dtype=dtype) - 0.5
        b = torch.rand(n, n, device=device, dtype=dtype) - 0.5
        c = torch.empty(n, n, device=device, dtype=dtype)
        return (lambda: torch.matmul(a, b, out=c)), 2.0 * n ** 3 / 1e9
    return neonlite, torch


class _Workload:
    def __init__(self, dtype_name):
        self.NAME = f"gemm8192_{dtype_name}"
        self.FIGURE = FIGURE
        self.neonlite, self.torch = _make(dtype_name)


BF16 = _Workload("bf16")
F32 = _Workload("f32")
