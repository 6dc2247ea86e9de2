"""BlockSparseLinear 4096 -> 4096 on 4096 rows (batch x tokens), 32 x 32 blocks, a random
layout at 5%, 10%, 25% or 50% density: fprop + bprop (input error) + weight gradient, against
the dense ``Linear`` of the same shape in neonlite (``neonlite_dense``) and PyTorch's dense
x @ W with autograd (``torch``).  Smoke mode: 64 -> 64 on 32 rows, 8 x 8 blocks.
Figure: ms per step (lower is better); the note gives dense / block-sparse time."""
import numpy as np

from .common import torch_threads

DENSITIES = (0.05, 0.10, 0.25, 0.50)


def _sizes(smoke):
    """(rows, features, block size)."""
    return (32, 64, 8) if smoke else (4096, 4096, 32)


def _layer_step(be, layer, rows, features, seed=0):
    """fprop + bprop of a configured layer on fixed random data."""
    from neonlite.layers import Sequential
    net = Sequential([layer])
    net.name_children()
    net.configure((features,))
    net.set_needs_deltas(True)
    net.allocate()
    rng = np.random.default_rng(seed)
    x = be.array(rng.standard_normal((rows, features)))
    e = be.array(rng.standard_normal((rows, features)))

    def step():
        net.fprop(x)
        net.bprop(e)
    return step


class BlockSparseLinearWorkload:
    """One density's row of the table (a workload module's interface, as an object)."""

    FIGURE = "ms"

    def __init__(self, density):
        self.density = density
        self.NAME = f"bsl_{round(density * 100)}pct"

    def neonlite(self, make_backend, smoke):
        from neonlite.blocksparse import layouts
        from neonlite.layers import BlockSparseLinear
        rows, features, bs = _sizes(smoke)
        be = make_backend(rows)
        nb = features // bs
        layout = layouts.random((nb, nb), self.density, seed=0)
        return _layer_step(be, BlockSparseLinear(features, layout, bs), rows, features), None

    def extra_contenders(self, make_backend, smoke):
        from neonlite.layers import Linear
        rows, features, _ = _sizes(smoke)
        be = make_backend(rows)
        return {"neonlite_dense": _layer_step(be, Linear(features), rows, features)}

    def torch(self, device, smoke):
        torch = torch_threads()
        rows, features, _ = _sizes(smoke)
        x = torch.randn(rows, features, device=device, requires_grad=True)
        w = torch.randn(features, features, device=device, requires_grad=True)
        e = torch.randn(rows, features, device=device)

        def step():
            x.grad = w.grad = None
            (x @ w).backward(e)
        return step, None


WORKLOADS = tuple(BlockSparseLinearWorkload(d) for d in DENSITIES)
