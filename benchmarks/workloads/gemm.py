"""GEMM 256x4096 @ 4096x4096 fp32.  Figure: GFLOP/s (and % of this CPU's peak)."""
from .common import torch_threads

NAME = "gemm"
FIGURE = "GFLOP/s"


def _dims(smoke):
    return (16, 64, 64) if smoke else (256, 4096, 4096)


def neonlite(make_backend, smoke):
    import numpy as np
    m, k, n = _dims(smoke)
    be = make_backend(m)
    rng = np.random.default_rng(0)
    a, b = be.array(rng.random((m, k))), be.array(rng.random((k, n)))
    c = be.empty((m, n))
    return (lambda: be.compound_dot(a, b, c)), 2.0 * m * k * n / 1e9


def torch(device, smoke):
    torch = torch_threads()
    m, k, n = _dims(smoke)
    a = torch.rand(m, k, device=device)
    b = torch.rand(k, n, device=device)
    c = torch.empty(m, n, device=device)
    return (lambda: torch.matmul(a, b, out=c)), 2.0 * m * k * n / 1e9
