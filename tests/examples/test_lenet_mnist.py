"""Learning on real data: the issue's LeNet-style CNN, trained 5 epochs on 8,000 of the MNIST
test images (``../shared/data/mnist``) and measured on the other 2,000, misclassifies <= 3%."""
import numpy as np
import pytest
from support.harness import data_dir, lenet
from support.requires import requires

import neonlite
from neonlite.callbacks import Callbacks
from neonlite.data import ArrayIterator
from neonlite.data.idx import read_idx
from neonlite.layers import GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import CrossEntropyMulti, Misclassification

MNIST = data_dir() / "mnist"
IMAGES, LABELS = MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz"


@pytest.mark.slow
@requires("mnist")
def test_lenet_learns_mnist():
    X = read_idx(IMAGES)[..., None]
    y = read_idx(LABELS)
    assert X.shape == (10000, 28, 28, 1) and X.dtype == np.uint8 and y.shape == (10000,)
    neonlite.gen_backend("cpu", batch_size=128, rng_seed=0, datatype=np.float32)
    train = ArrayIterator(X[:8000], y[:8000], nclass=10)
    valid = ArrayIterator(X[8000:], y[8000:], nclass=10, shuffle=False)
    model = lenet()
    callbacks = Callbacks(model, eval_set=valid, eval_freq=5, progress=False)
    model.fit(train, optimizer=GradientDescentMomentum(0.05, momentum_coef=0.9, wdecay=1e-4),
              num_epochs=5, cost=GeneralizedCost(CrossEntropyMulti()), callbacks=callbacks)
    error = model.eval(valid, metric=Misclassification())
    assert error <= 0.03, f"misclassification {error:.4f} on the 2,000 held-out images"
    assert model.last_eval == ("misclassification", error, 4)
