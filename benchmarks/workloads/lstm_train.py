"""2-layer LSTM train step: LSTM(512) x 2 over T=64 steps of 128-wide inputs, batch 32, a
per-step mean-squared error against fixed targets, fprop + bprop + an Adam update; smoke mode
2 x 16 units, T=8, batch 2.  Figure: sequence steps (batch rows x T) per second."""
import numpy as np

from .common import FixedBatch, torch_threads

NAME = "lstm_train"
FIGURE = "steps/s"


def _sizes(smoke):
    """(batch, T, D, hidden)."""
    return (2, 8, 8, 16) if smoke else (32, 64, 128, 512)


def _data(n, T, D, H, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, T, D)), rng.normal(size=(n, T, H))


def neonlite(make_backend, smoke):
    from neonlite import Model
    from neonlite.layers import LSTM, GeneralizedCost
    from neonlite.optimizers import Adam
    from neonlite.transforms import MeanSquared
    n, T, D, H = _sizes(smoke)
    be = make_backend(n)
    model = Model([LSTM(H), LSTM(H)])
    model.initialize(FixedBatch((T, D), (T, H)), GeneralizedCost(MeanSquared()))
    x, t = _data(n, T, D, H)
    x, t = be.array(x), be.array(t)
    opt = Adam(1e-3)
    return (lambda: model.train_step(x, t, opt, 0)), n * T


def torch(device, smoke):
    torch = torch_threads()
    n, T, D, H = _sizes(smoke)
    model = torch.nn.LSTM(D, H, num_layers=2, batch_first=True).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, t = _data(n, T, D, H)
    x = torch.tensor(x, dtype=torch.float32, device=device)
    t = torch.tensor(t, dtype=torch.float32, device=device)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x)[0], t)
        loss.backward()
        opt.step()
        return loss.item()
    return step, n * T
