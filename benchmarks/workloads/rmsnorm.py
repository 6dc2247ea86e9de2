"""RMSNorm forward + backward on (N*T, d) = (8192, 1024) float32 rows (the norm of a
Llama-style block at batch 8, T = 1024): neonlite's RMSNorm layer (the ``rmsnorm_*`` kernels,
``kernels/cpu/rmsnorm.c``) against ``torch.nn.RMSNorm`` on the same rows, each timed as
fprop, then bprop of a fixed output gradient (torch: ``y.backward(w)``).  Figure: ms per
fprop + bprop (lower is better; ratio > 1: neonlite faster)."""
import numpy as np

NAME = "rmsnorm"
FIGURE = "ms"


def _sizes(smoke):
    return (64, 128) if smoke else (8192, 1024)


def neonlite(make_backend, smoke):
    from neonlite.layers import RMSNorm, Sequential
    M, d = _sizes(smoke)
    be = make_backend(M)
    net = Sequential([RMSNorm(eps=1e-5)])
    net.name_children()
    net.configure((d,))
    net.set_needs_deltas(True)
    net.allocate()
    rng = np.random.default_rng(0)
    x, w = be.array(rng.normal(size=(M, d))), be.array(rng.normal(size=(M, d)))

    def step():
        net.fprop(x)
        net.bprop(w)
    return step, None


def torch(device, smoke):
    import torch as th
    M, d = _sizes(smoke)
    norm = th.nn.RMSNorm(d, eps=1e-5).to(device)
    gen = th.Generator().manual_seed(0)
    x = th.randn(M, d, generator=gen).to(device).requires_grad_(True)
    w = th.randn(M, d, generator=gen).to(device)

    def step():
        x.grad = None
        norm.weight.grad = None
        norm(x).backward(w)
    return step, None
