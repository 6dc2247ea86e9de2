"""examples/conv_autoencoder learns the real MNIST images (slow): the example's network with
one output channel, trained on 8,000 of the 10,000 test images in a fixed order, reconstructs
the other 2,000 at least about as well as the same network does in PyTorch from the same
initial weights with the same batches and optimizer (the bound is measured in the same run)."""
import importlib.util
import time

import numpy as np
import pytest
from support.harness import CHECKOUT, data_dir
from support.requires import requires

import neonlite
from neonlite import Model
from neonlite.data.idx import read_idx
from neonlite.data.iterator import ArrayIterator
from neonlite.layers import Deconvolution
from neonlite.transforms import MeanSquaredError

IMAGES = data_dir() / "mnist" / "t10k-images-idx3-ubyte.gz"


def _network():
    path = CHECKOUT / "examples" / "conv_autoencoder.py"
    spec = importlib.util.spec_from_file_location("example_conv_autoencoder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.network(channels=1)


def _torch_twin(torch, model):
    """The same layers in PyTorch (NCHW) with the neonlite model's weights."""
    nn, mods = torch.nn, []
    for leaf in model.layers.leaves():
        kind = type(leaf).__name__
        if kind in ("Convolution", "Deconvolution"):
            R, S, A, B = leaf.W.value.shape
            conv = (nn.Conv2d(A, B, (R, S), padding=1) if kind == "Convolution" else
                    nn.ConvTranspose2d(B, A, (R, S), stride=2, padding=1, output_padding=1))
            with torch.no_grad():
                conv.weight.copy_(torch.tensor(leaf.W.value.get().transpose(3, 2, 0, 1)))
                if getattr(leaf, "b", None) is not None:
                    conv.bias.copy_(torch.tensor(leaf.b.value.get()))
            mods.append(conv)
            act = type(getattr(leaf, "activation", None)).__name__
            if act in ("Rectlin", "Logistic"):
                mods.append(nn.ReLU() if act == "Rectlin" else nn.Sigmoid())
        elif kind == "Bias":
            with torch.no_grad():
                mods[-1].bias.copy_(torch.tensor(leaf.b.value.get()))
        elif kind == "Activation":
            relu = type(leaf.transform).__name__ == "Rectlin"
            mods.append(nn.ReLU() if relu else nn.Sigmoid())
        elif kind == "Pooling":
            mods.append(nn.MaxPool2d(2))
        else:
            raise AssertionError(f"unexpected layer {kind}")
    return nn.Sequential(*mods)


@pytest.mark.slow
@requires("mnist")
def test_autoencoder_reconstructs_mnist_as_well_as_pytorch():
    torch = pytest.importorskip("torch", reason="the bound is measured in PyTorch")
    X = read_idx(str(IMAGES)).reshape(-1, 28, 28, 1)
    epochs, batch = 2, 32
    neonlite.gen_backend("cpu", batch_size=batch, rng_seed=0)
    layers, cost, optimizer = _network()
    model = Model(layers)
    train = ArrayIterator(X[:8000], None, shuffle=False, name="mnist train")
    valid = ArrayIterator(X[8000:], None, shuffle=False, name="mnist valid")
    model.initialize(train, cost)
    twin = _torch_twin(torch, model)
    start = time.perf_counter()
    model.fit(train, optimizer, num_epochs=epochs, cost=cost)
    neon_seconds = time.perf_counter() - start
    neon_mse = model.eval(valid, MeanSquaredError())

    images = torch.tensor(X.transpose(0, 3, 1, 2) / 255.0, dtype=torch.float32)
    opt = torch.optim.Adam(twin.parameters(), lr=1e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        for i in range(0, 8000, batch):
            x = images[i:i + batch]
            loss = torch.nn.functional.mse_loss(twin(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch_seconds = time.perf_counter() - start
    with torch.no_grad():
        held = images[8000:]
        torch_mse = float(torch.nn.functional.mse_loss(twin(held), held))
    print(f"\nconv autoencoder, {epochs} epochs on 8,000 MNIST images: valid MSE neonlite "
          f"{neon_mse:.5f} in {neon_seconds:.1f} s, PyTorch {torch_mse:.5f} in "
          f"{torch_seconds:.1f} s")
    assert neon_mse < 0.6 * float(((held - held.mean()) ** 2).mean())
    assert neon_mse <= 1.05 * torch_mse
    assert any(isinstance(leaf, Deconvolution) for leaf in model.layers.leaves())
