"""2-layer recurrent train steps, a per-step mean-squared error against fixed targets, fprop +
bprop + an Adam update, against the same torch.nn cell:

* ``lstm_train``: LSTM(512) x 2 over T=64 steps of 128-wide inputs, batch 32;
* ``rnn_train`` / ``gru_train``: Recurrent (Elman, tanh) or GRU, 64 units x 2 over T=64 steps
  of 32-wide inputs, batch 8: a small model, where the per-step host cost of a Python loop
  over time would dominate.

Smoke mode: 2 x 16 units, T=8, batch 2.  Figure: sequence steps (batch rows x T) per second."""
import numpy as np

from .common import FixedBatch, torch_threads


SMOKE = (2, 8, 8, 16)


def _data(n, T, D, H, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, T, D)), rng.normal(size=(n, T, H))


class RecurrentTrain:
    """One cell's row (a workload module's interface, as an object); ``sizes``: (batch, T, D,
    hidden)."""

    FIGURE = "steps/s"

    def __init__(self, name, cell, torch_cell, sizes):
        self.NAME, self.cell, self.torch_cell, self.sizes = name, cell, torch_cell, sizes

    def _sizes(self, smoke):
        return SMOKE if smoke else self.sizes

    def neonlite(self, make_backend, smoke):
        from neonlite import Model
        from neonlite import layers
        from neonlite.layers import GeneralizedCost
        from neonlite.optimizers import Adam
        from neonlite.transforms import MeanSquared
        n, T, D, H = self._sizes(smoke)
        be = make_backend(n)
        cell = getattr(layers, self.cell)
        model = Model([cell(H), cell(H)])
        model.initialize(FixedBatch((T, D), (T, H)), GeneralizedCost(MeanSquared()))
        x, t = (be.array(a) for a in _data(n, T, D, H))
        opt = Adam(1e-3)
        return (lambda: model.train_step(x, t, opt, 0)), n * T

    def torch(self, device, smoke):
        torch = torch_threads()
        n, T, D, H = self._sizes(smoke)
        model = getattr(torch.nn, self.torch_cell)(D, H, num_layers=2,
                                                   batch_first=True).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, t = (torch.tensor(a, dtype=torch.float32, device=device)
                for a in _data(n, T, D, H))

        def step():
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.mse_loss(model(x)[0], t)
            loss.backward()
            opt.step()
            return loss.item()
        return step, n * T


LSTM_TRAIN = RecurrentTrain("lstm_train", "LSTM", "LSTM", (32, 64, 128, 512))
SMALL = (RecurrentTrain("rnn_train", "Recurrent", "RNN", (8, 64, 32, 64)),
         RecurrentTrain("gru_train", "GRU", "GRU", (8, 64, 32, 64)))
