"""The conv autoencoder's decoder train step (examples/conv_autoencoder.py with MNIST's one
channel): from (7, 7, 32) codes, Deconv 3x3 stride 2 to (14, 14, 16) + ReLU, Deconv 3x3 stride
2 to (28, 28, 1) + logistic, mean-squared error against fixed images, fprop + bprop + Adam;
batch 64.  Smoke mode: (2, 2, 4) codes, 4 and 1 channels, batch 2.  Figure: images/s."""
import numpy as np

from .common import FixedBatch, torch_threads

NAME = "deconv"
FIGURE = "images/s"


def _sizes(smoke):
    """(batch, code side, code channels, middle channels)."""
    return (2, 2, 4, 4) if smoke else (64, 7, 32, 16)


def _data(n, side, c):
    rng = np.random.default_rng(0)
    return rng.random((n, side, side, c)), rng.random((n, 4 * side, 4 * side, 1))


def neonlite(make_backend, smoke):
    from neonlite import Model
    from neonlite.layers import Deconv, GeneralizedCost
    from neonlite.optimizers import Adam
    from neonlite.transforms import Logistic, MeanSquared, Rectlin
    n, side, c, mid = _sizes(smoke)
    be = make_backend(n)
    model = Model([Deconv((3, 3, mid), strides=2, padding=1, output_padding=1,
                          activation=Rectlin()),
                   Deconv((3, 3, 1), strides=2, padding=1, output_padding=1,
                          activation=Logistic())])
    model.initialize(FixedBatch((side, side, c), (4 * side, 4 * side, 1)),
                     GeneralizedCost(MeanSquared()))
    x, t = _data(n, side, c)
    x, t = be.array(x), be.array(t)
    opt = Adam(1e-3)
    return (lambda: model.train_step(x, t, opt, 0)), n


def torch(device, smoke):
    torch = torch_threads()
    nn = torch.nn
    n, side, c, mid = _sizes(smoke)
    model = nn.Sequential(nn.ConvTranspose2d(c, mid, 3, 2, 1, 1), nn.ReLU(),
                          nn.ConvTranspose2d(mid, 1, 3, 2, 1, 1), nn.Sigmoid()).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, t = _data(n, side, c)
    x = torch.tensor(x.transpose(0, 3, 1, 2), dtype=torch.float32, device=device)
    t = torch.tensor(t.transpose(0, 3, 1, 2), dtype=torch.float32, device=device)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss.item()
    return step, n
