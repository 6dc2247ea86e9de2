"""Batch norm + ReLU alone, forward + backward, on the NHWC activations of
``examples/shapes_cnn.yaml``'s first convolution: x (32, 32, 32, 16).  neonlite: the
``BatchNorm(activation=Rectlin())`` layer that ``Conv(batch_norm=True)`` runs; PyTorch:
``BatchNorm2d`` on a channels-last tensor, then ``relu``, and the backward of both.

Figure: GB/s of the minimal traffic of a forward and backward, 8 passes over the tensor
(forward: read x for the statistics, read x and write y; backward: read dy and y for the sums,
read dy, y and x, write dx), as ``bn_relu_bf16`` counts it on the GPU, so it can be set against
the cache's bandwidth (neonlite also writes xhat and reads it instead of x, which the backend
contract keeps)."""
from .common import FixedBatch, torch_threads

NAME = "bn_relu_nhwc"
FIGURE = "GB/s"


def _dims(smoke):
    return (2, 8, 8, 16) if smoke else (32, 32, 32, 16)


def _bytes(smoke):
    n, h, w, c = _dims(smoke)
    return 8.0 * n * h * w * c * 4 / 1e9


def neonlite(make_backend, smoke):
    import numpy as np
    from neonlite import Model
    from neonlite.layers import BatchNorm
    from neonlite.transforms import Rectlin
    n, h, w, c = _dims(smoke)
    be = make_backend(n)
    model = Model([BatchNorm(activation=Rectlin())])
    model.initialize(FixedBatch((h, w, c), (h, w, c)))
    layer = model.layers.layers[0]
    layer.set_needs_deltas(True)
    layer.allocate()
    rng = np.random.default_rng(0)
    x = be.array(rng.standard_normal((n, h, w, c)))
    e = be.array(rng.standard_normal((n, h, w, c)))

    def step():
        layer.fprop(x)
        layer.bprop(e)
    return step, _bytes(smoke)


def torch(device, smoke):
    torch = torch_threads()
    n, h, w, c = _dims(smoke)
    bn = torch.nn.BatchNorm2d(c).to(device)
    x = torch.randn(n, c, h, w, device=device).to(
        memory_format=torch.channels_last).requires_grad_()
    e = torch.randn(n, c, h, w, device=device).to(memory_format=torch.channels_last)

    def step():
        x.grad = None
        torch.relu(bn(x)).backward(e)
    return step, _bytes(smoke)
