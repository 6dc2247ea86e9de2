"""Batch norm + ReLU (fused, as ``Conv(batch_norm=True, activation=Rectlin())`` runs it) + 2x2
max pool on 64x32x32x64, forward + backward.  Figure: ms per step (the ratio column is still
speed: PyTorch time / neonlite time)."""
from .common import FixedBatch, torch_threads

NAME = "bn_relu_pool"
FIGURE = "ms"


def _dims(smoke):
    return (4, 8, 8, 8) if smoke else (64, 32, 32, 64)


def neonlite(make_backend, smoke):
    import numpy as np
    from neonlite import Model
    from neonlite.layers import BatchNorm, Pooling
    from neonlite.transforms import Rectlin
    n, h, w, c = _dims(smoke)
    be = make_backend(n)
    model = Model([BatchNorm(activation=Rectlin()), Pooling(2)])
    model.initialize(FixedBatch((h, w, c), (h // 2, w // 2, c)))
    model.layers.set_needs_deltas(True)
    for layer in model.layers.layers:
        layer.allocate()
    rng = np.random.default_rng(0)
    x = be.array(rng.standard_normal((n, h, w, c)))
    e = be.array(rng.standard_normal((n, h // 2, w // 2, c)))

    def step():
        model.fprop(x)
        model.bprop(e)
    return step, None


def torch(device, smoke):
    torch = torch_threads()
    n, h, w, c = _dims(smoke)
    bn = torch.nn.BatchNorm2d(c).to(device)
    x = torch.randn(n, c, h, w, device=device, requires_grad=True)
    e = torch.randn(n, c, h // 2, w // 2, device=device)

    def step():
        x.grad = None
        torch.nn.functional.max_pool2d(torch.relu(bn(x)), 2).backward(e)
    return step, None
