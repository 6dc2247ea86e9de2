"""One Adam step over 100 M float32 parameters on the GPU (neonlite's op-tree kernels against
``torch.optim.Adam(fused=True)``).  Figure: GB/s of the minimal traffic of a fused step, 28
bytes per parameter (read w, g, m, v; write w, m, v), so the figure can be set against the
GPU's memory bandwidth.  GPU only (``--backend gpu``)."""
import numpy as np

NAME = "adam_100m"
FIGURE = "GB/s"


def _count(smoke):
    return 1 << 12 if smoke else 100_000_000


def neonlite(make_backend, smoke):
    from neonlite.layers.layer import Parameter
    from neonlite.optimizers import Adam
    n = _count(smoke)
    be = make_backend(1)
    rng = np.random.default_rng(0)
    value = be.array(rng.standard_normal(n, dtype=np.float32))
    grad = be.array(rng.standard_normal(n, dtype=np.float32))
    param = Parameter(None, "w", value, grad)
    opt = Adam(learning_rate=1e-3)
    return (lambda: opt.optimize([param], 0)), 28.0 * n / 1e9


def torch(device, smoke):
    import torch
    n = _count(smoke)
    p = torch.nn.Parameter(torch.randn(n, device=device))
    p.grad = torch.randn(n, device=device)
    opt = torch.optim.Adam([p], lr=1e-3, fused=True)
    return opt.step, 28.0 * n / 1e9
