"""GPU batch norm + ReLU and softmax-cross-entropy, forward and backward, bfloat16, against
PyTorch (eager, autograd) on the same device.

* ``bn_relu_bf16``: x (64, 56, 56, 64) NHWC.  neonlite: ``batchnorm_fprop(relu=True)`` then
  ``batchnorm_bprop(y=...)``.  Figure: GB/s of the minimal traffic of a fused forward and
  backward, 8 passes over the tensor (forward: read x for the statistics, read x and write y;
  backward: read dy and y for the sums, read dy, y and x, write dx), so it can be set against
  the GPU's memory bandwidth (neonlite also writes and reads xhat, which the contract keeps).
* ``softmax_ce_bf16``: 8192 rows x 50257 classes, mean loss.  neonlite reads dense one-hot
  targets and writes probabilities and gradients (the backend contract); PyTorch's
  ``cross_entropy`` takes class indices; neonlite returns the loss as a Python float (one
  synchronization per step), PyTorch keeps it on the device.  Figure: rows/s.

GPU only (``--backend gpu``); smoke sizes are tiny."""
import numpy as np


def _bn_dims(smoke):
    return (2, 8, 8, 16) if smoke else (64, 56, 56, 64)


def _bn_neonlite(make_backend, smoke):
    from neonlite import gen_backend
    N, H, W, C = _bn_dims(smoke)
    be = gen_backend("gpu", batch_size=N, rng_seed=0, datatype="bf16")
    rng = np.random.default_rng(0)
    M = N * H * W
    x = be.array(rng.standard_normal((M, C), dtype=np.float32))
    dy = be.array(rng.standard_normal((M, C), dtype=np.float32))
    g, b = be.ones((1, C)), be.zeros((1, C))
    y, xhat, dx = be.empty((M, C)), be.empty((M, C)), be.empty((M, C))
    mean, inv, rm, rv = be.zeros((1, C)), be.zeros((1, C)), be.zeros((1, C)), be.ones((1, C))
    dg, db = be.zeros((1, C)), be.zeros((1, C))

    def step():
        be.batchnorm_fprop(x, g, b, y, xhat, mean, inv, rm, rv, relu=True)
        be.batchnorm_bprop(dy, xhat, inv, g, dx, dg, db, y=y)
    return step, 8.0 * M * C * 2 / 1e9


def _bn_torch(device, smoke):
    import torch
    N, H, W, C = _bn_dims(smoke)
    x = torch.randn(N, C, H, W, device=device, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last).requires_grad_()
    bn = torch.nn.BatchNorm2d(C).to(device=device, dtype=torch.bfloat16)
    dy = torch.randn(N, C, H, W, device=device, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last)

    def step():
        y = torch.relu(bn(x))
        y.backward(dy)
    return step, 8.0 * N * H * W * C * 2 / 1e9


def _ce_dims(smoke):
    return (64, 1000) if smoke else (8192, 50257)


def _ce_neonlite(make_backend, smoke):
    from neonlite import gen_backend
    rows, classes = _ce_dims(smoke)
    be = gen_backend("gpu", batch_size=rows, rng_seed=0, datatype="bf16")
    rng = np.random.default_rng(0)
    logits = be.empty((rows, classes))
    be.uniform(logits, -4.0, 4.0)
    targets = be.zeros((rows, classes))
    onehot = np.zeros((rows, classes), np.float32)
    onehot[np.arange(rows), rng.integers(0, classes, rows)] = 1.0
    targets.set(onehot)
    probs, grad = be.empty((rows, classes)), be.empty((rows, classes))
    return (lambda: be.softmax_cross_entropy(logits, targets, probs, grad, 1.0 / rows)), rows


def _ce_torch(device, smoke):
    import torch
    rows, classes = _ce_dims(smoke)
    logits = (torch.rand(rows, classes, device=device, dtype=torch.bfloat16) * 8 - 4)
    logits.requires_grad_()
    ids = torch.randint(0, classes, (rows,), device=device)

    def step():
        torch.nn.functional.cross_entropy(logits, ids).backward()
    return step, rows


class _Workload:
    def __init__(self, name, figure, neonlite, torch):
        self.NAME, self.FIGURE, self.neonlite, self.torch = name, figure, neonlite, torch


BN_RELU = _Workload("bn_relu_bf16", "GB/s", _bn_neonlite, _bn_torch)
SOFTMAX_CE = _Workload("softmax_ce_bf16", "rows/s", _ce_neonlite, _ce_torch)
