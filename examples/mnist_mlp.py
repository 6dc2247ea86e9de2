"""neon's classic MNIST MLP in Python: the network of ``mnist_mlp.yaml``.

    python examples/mnist_mlp.py --data-dir DIR     # same flags as neonlite train
"""
from neonlite.cli.example import example_main
from neonlite.initializers import Gaussian
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import CrossEntropyBinary, Logistic, Rectlin

SETTINGS = {"backend": "cpu", "epochs": 10, "batchsize": 128, "rng_seed": 0,
            "dataset": "mnist"}


def network():
    """(layers, cost, optimizer): 784 -> 100 ReLU -> 10 logistic, binary cross-entropy."""
    init = Gaussian(loc=0.0, scale=0.01)
    layers = [Affine(100, init=init, activation=Rectlin()),
              Affine(10, init=init, activation=Logistic())]
    cost = GeneralizedCost(CrossEntropyBinary())
    optimizer = GradientDescentMomentum(0.1, momentum_coef=0.9)
    return layers, cost, optimizer


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
