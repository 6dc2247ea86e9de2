"""ONNX import (``Model.from_onnx``, ``neonlite import model.onnx``) of standard
CNNs: PyTorch's logits within 1e-4 (relative to the largest, float32) on real MNIST digits
(resized to the input size by repeating each pixel, repeated to 3 channels, NHWC for
neonlite, NCHW for PyTorch); a neonlite CNN exported and imported back bit-identical; an
imported model trains.

The torchvision ResNet-18 test needs an interpreter with torchvision: this one, or the one
the environment variable ``NEONLITE_TORCHVISION_PYTHON`` names (it exports the model and
writes PyTorch's logits in a subprocess; it needs torch, torchvision and onnx, not
neonlite), and skips saying so otherwise.  The ResNet-18-shaped model written here in plain
torch (BasicBlocks with projection shortcuts, BatchNorm, max and global average pooling)
runs the same round trip wherever torch is installed, with BatchNorm folded into the
convolutions by the exporter and kept as BatchNormalization nodes.
"""
import importlib.util
import os
import subprocess

import numpy as np
import pytest

import neonlite.layers as L
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.data.idx import read_idx
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms.activation import Logistic, Rectlin, Softmax, Tanh
from neonlite.transforms.cost import CrossEntropyMulti
from support.harness import data_dir, make_backend
from support.onnx_parity import onnx_outputs, randomize, relative_difference
from support.requires import need, requires

pytestmark = requires("onnx", "onnxruntime", "mnist")

TOLERANCE = 1e-4
SIZE = 56  # 28 x 2: each MNIST pixel repeated 2 x 2


def digits(n, channels=3, size=SIZE):
    """``n`` real MNIST test digits, NCHW float32 (n, channels, size, size), normalized."""
    folder = data_dir() / "mnist"
    X = read_idx(str(folder / "t10k-images-idx3-ubyte.gz"))[:n].astype(np.float32) / 255.0
    scale = size // 28
    X = X.repeat(scale, axis=1).repeat(scale, axis=2)
    X = (X - 0.1307) / 0.3081
    return np.ascontiguousarray(np.repeat(X[:, None], channels, axis=1), np.float32)


def nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def torch_resnet18(num_classes=10):
    """A ResNet-18 in plain torch (torchvision's architecture: 7x7/2 stem, 3x3/2 max pool,
    four stages of two BasicBlocks, 1x1/2 projection shortcuts, global average pool, fc)."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + (x if self.down is None else self.down(x)))

    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), *stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(512, num_classes))


def randomize_batch_norms(module, seed=0):
    """Running statistics and affine parameters of every BatchNorm away from 0 and 1."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def torch_export(module, x, path, **options):
    """PyTorch's logits of ``module`` (eval) on NCHW ``x``, after exporting it to ``path``
    (TorchScript exporter, opset 17, dynamic batch)."""
    import torch
    module.eval()
    with torch.no_grad():
        logits = module(torch.from_numpy(x)).numpy()
    torch.onnx.export(module, torch.from_numpy(x[:1]), str(path), dynamo=False, opset_version=17,
                      input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, **options)
    return logits


@requires("torch")
@pytest.mark.parametrize("batch_norm", ["folded by the exporter", "BatchNormalization nodes"])
def test_plain_torch_resnet18_imports_with_pytorchs_logits(batch_norm, tmp_path):
    import torch
    torch.manual_seed(0)
    module = torch_resnet18()
    randomize_batch_norms(module)
    x = digits(6)
    path = tmp_path / "resnet18.onnx"
    options = {} if batch_norm.startswith("folded") else {"do_constant_folding": False}
    logits = torch_export(module, x, path, **options)
    make_backend("cpu", batch_size=4)
    model = Model.from_onnx(path)
    kinds = {type(leaf).__name__ for leaf in model.layers.leaves()}
    assert ("BatchNorm" in kinds) == (not batch_norm.startswith("folded")), kinds
    assert {"MergeSum", "SkipNode"} <= {type(l).__name__ for l in model.layers.layers} | {
        type(b.layers[0]).__name__ for l in model.layers.layers
        if isinstance(l, L.MergeSum) for b in l.branches}
    difference = relative_difference(model.predict(nhwc(x)), logits)
    assert difference <= TOLERANCE, f"max relative difference {difference:.3g}"


TORCHVISION_SCRIPT = """
import sys
import numpy as np
import torch
import torchvision
x = np.load(sys.argv[1])
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None, num_classes=1000).eval()
with torch.no_grad():
    np.save(sys.argv[3], model(torch.from_numpy(x)).numpy())
torch.onnx.export(model, torch.from_numpy(x[:1]), sys.argv[2], dynamo=False, opset_version=17,
                  input_names=["images"], output_names=["logits"],
                  dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
"""


def torchvision_python():
    """An interpreter that imports torchvision: this one, or $NEONLITE_TORCHVISION_PYTHON."""
    import sys
    if importlib.util.find_spec("torchvision") is not None:
        return sys.executable
    other = os.environ.get("NEONLITE_TORCHVISION_PYTHON")
    if not other:
        pytest.skip("torchvision is not installed here and NEONLITE_TORCHVISION_PYTHON names "
                    "no interpreter that has it")
    probe = subprocess.run([other, "-c", "import torchvision, onnx"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"NEONLITE_TORCHVISION_PYTHON={other} cannot import torchvision and onnx")
    return other


def test_torchvision_resnet18_imports_with_pytorchs_logits(tmp_path):
    python = torchvision_python()
    x = digits(6)
    np.save(tmp_path / "x.npy", x)
    path, logits = tmp_path / "resnet18.onnx", tmp_path / "logits.npy"
    done = subprocess.run([python, "-c", TORCHVISION_SCRIPT, tmp_path / "x.npy", path, logits],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    make_backend("cpu", batch_size=4)
    model = Model.from_onnx(path)
    difference = relative_difference(model.predict(nhwc(x)), np.load(logits))
    print(f"torchvision ResNet-18: max relative difference {difference:.3g}")
    assert difference <= TOLERANCE, f"max relative difference {difference:.3g}"


def neonlite_cnn():
    """Every layer import reads back: fused conv + bias + ReLU, conv + batch norm + ReLU, a
    residual MergeSum with a SkipNode, a concatenating MergeBroadcast, max and padded average
    pooling, a Flatten of 3 x 3 features into Affine layers, Logistic, Tanh and Softmax."""
    return [L.Conv((3, 3, 8), padding=1, activation=Rectlin()),
            L.Conv((3, 3, 8), padding=1, batch_norm=True, activation=Rectlin()),
            L.MergeSum([[L.Conv((3, 3, 8), padding=1, activation=Rectlin()),
                         L.Conv((3, 3, 8), padding=1)], [L.SkipNode()]]),
            L.Activation(Rectlin()), L.Pooling(2),
            L.MergeBroadcast([[L.Conv((1, 1, 4), activation=Rectlin())],
                              [L.Conv((3, 3, 6), padding=1, activation=Logistic())]],
                             merge="concat"),
            L.Pooling(3, strides=2, padding=1, op="avg"), L.Dropout(0.8), L.Flatten(),
            L.Affine(16, activation=Tanh()), L.Affine(10, activation=Softmax())]


def test_neonlite_cnn_exported_and_imported_is_bit_identical(tmp_path):
    make_backend("cpu", batch_size=4)
    model = Model(neonlite_cnn(), name="cnn")
    model.initialize(ArrayIterator(np.zeros((4, 14, 14, 1), np.float32), shuffle=False))
    randomize(model)
    path = tmp_path / "cnn.onnx"
    model.export_onnx(path)
    again = Model.from_onnx(path)
    ours, theirs = list(model.get_params().values()), list(again.get_params().values())
    assert [a.shape for a in ours] == [b.shape for b in theirs]
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))
    x = nhwc(digits(7, channels=1, size=28))[:, ::2, ::2]
    assert np.array_equal(model.predict(x), again.predict(x))
    assert relative_difference(again.predict(x), onnx_outputs(path, x)) <= 1e-5


def test_flatten_of_nchw_features_feeds_gemm_in_neonlite_order(tmp_path):
    """A torch CNN whose Linear reads 4 x 4 x 8 features flattened in NCHW order."""
    need("torch")
    import torch.nn as nn
    module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Conv2d(8, 8, 3, 2, 1), nn.Tanh(), nn.Flatten(),
                           nn.Linear(128, 20), nn.LeakyReLU(0.1), nn.Dropout(0.3),
                           nn.Linear(20, 5), nn.Softmax(dim=1))
    x = digits(5, size=28)[:, :, ::2, ::2].copy()
    logits = torch_export(module, x, tmp_path / "cnn.onnx")
    make_backend("cpu", batch_size=2)
    model = Model.from_onnx(tmp_path / "cnn.onnx")
    assert relative_difference(model.predict(nhwc(x)), logits) <= 1e-5


def test_an_imported_model_trains(tmp_path):
    """The imported CNN fits 64 real digits: its misclassification on them falls to a
    quarter or less in 15 epochs."""
    make_backend("cpu", batch_size=16)
    source = Model(neonlite_cnn(), name="cnn")
    source.initialize(ArrayIterator(np.zeros((16, 14, 14, 1), np.float32), shuffle=False))
    source.export_onnx(tmp_path / "cnn.onnx")
    model = Model.from_onnx(tmp_path / "cnn.onnx")
    folder = data_dir() / "mnist"
    x = nhwc(digits(64, channels=1, size=28))[:, ::2, ::2]
    labels = read_idx(str(folder / "t10k-labels-idx1-ubyte.gz"))[:64].astype(np.int64)
    data = ArrayIterator(x, labels, nclass=10)
    before = model.eval(data)
    model.fit(data, GradientDescentMomentum(0.05, momentum_coef=0.9), num_epochs=15,
              cost=L.GeneralizedCost(CrossEntropyMulti()), progress=False)
    after = model.eval(data)
    assert after <= 0.25 and after < before, (before, after)
