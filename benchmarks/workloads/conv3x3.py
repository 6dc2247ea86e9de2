"""3x3 convolution 64->64, 32x32, batch 64, pad 1: fprop + bprop (data) + update (weights).
Figure: GFLOP/s (3 x 2*N*P*Q*K*R*S*C per step)."""
from .common import FixedBatch, torch_threads

NAME = "conv3x3"
FIGURE = "GFLOP/s"


def _dims(smoke):
    return (4, 8, 8, 8) if smoke else (64, 32, 32, 64)


def neonlite(make_backend, smoke):
    import numpy as np
    from neonlite import Model
    from neonlite.layers import Convolution
    n, h, w, c = _dims(smoke)
    be = make_backend(n)
    model = Model([Convolution((3, 3, c), padding=1)])
    model.initialize(FixedBatch((h, w, c), (h, w, c)))
    layer = model.layers.layers[0]
    layer.set_needs_deltas(True)
    layer.allocate()
    rng = np.random.default_rng(0)
    x = be.array(rng.random((n, h, w, c)))
    e = be.array(rng.random((n, h, w, c)))

    def step():
        layer.fprop(x)
        layer.bprop(e)
    return step, 3 * 2.0 * n * h * w * c * 9 * c / 1e9


def torch(device, smoke):
    torch = torch_threads()
    n, h, w, c = _dims(smoke)
    conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(device)
    x = torch.rand(n, c, h, w, device=device, requires_grad=True)
    e = torch.rand(n, c, h, w, device=device)

    def step():
        x.grad = None
        conv.weight.grad = None
        conv(x).backward(e)
    return step, 3 * 2.0 * n * h * w * c * 9 * c / 1e9
