"""Random batches of the right shape for ``neonlite profile --synthetic``: profiling needs
shapes, not data, so a network can be timed without its data set."""
import numpy as np


class SyntheticBatches:
    """``count`` batches of one fixed random (x, t) pair on the current backend: x of the
    data set's example ``shape`` (token ids below ``vocab`` when the model starts with an
    embedding, else uniform [0, 1)), t one-hot (or per-position one-hot) over the last axis of
    ``target_shape``."""

    def __init__(self, be, shape, target_shape, count, vocab=None, seed=0, name="synthetic"):
        rng = np.random.default_rng(seed)
        n = be.bsz
        self.shape, self.target_shape = tuple(shape), tuple(target_shape)
        self.count, self.name, self.ndata = count, name, count * n
        x = rng.integers(0, vocab, size=(n,) + self.shape) if vocab else \
            rng.random((n,) + self.shape)
        labels = rng.integers(0, self.target_shape[-1], size=(n,) + self.target_shape[:-1])
        t = np.zeros((n,) + self.target_shape)
        np.put_along_axis(t, labels[..., None], 1.0, axis=-1)
        self.x, self.t = be.array(x), be.array(t)

    def __len__(self):
        return self.count

    def __iter__(self):
        return ((self.x, self.t) for _ in range(self.count))

    def batches(self, shuffle=False):
        return iter(self)


def first_vocab(model):
    """The vocabulary of the model's first layer when it is an embedding, else None."""
    first = model.layers.leaves()[0]
    return getattr(first, "vocab", None)
