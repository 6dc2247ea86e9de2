"""A LeNet-style CNN with batch norm on MNIST in Python: the network of ``mnist_cnn.yaml``.

    python examples/mnist_cnn.py --data-dir DIR     # same flags as neonlite train
"""
from neonlite.cli.example import example_main
from neonlite.initializers import GlorotUniform, Kaiming
from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling
from neonlite.optimizers import GradientDescentMomentum, StepSchedule
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

SETTINGS = {"backend": "cpu", "epochs": 5, "batchsize": 64, "rng_seed": 0,
            "dataset": "mnist"}


def network():
    """(layers, cost, optimizer): conv 5x5x20 - pool - conv 5x5x50 - pool (each conv with
    batch norm and ReLU), 500 hidden units, softmax over 10 digits."""
    layers = [Conv((5, 5, 20), init=Kaiming(), batch_norm=True, activation=Rectlin()),
              Pooling(2, op="max"),
              Conv((5, 5, 50), init=Kaiming(), batch_norm=True, activation=Rectlin()),
              Pooling(2, op="max"),
              Affine(500, init=Kaiming(), batch_norm=True, activation=Rectlin()),
              Affine(10, init=GlorotUniform(), activation=Softmax())]
    cost = GeneralizedCost(CrossEntropyMulti())
    optimizer = GradientDescentMomentum(0.05, momentum_coef=0.9, wdecay=0.0005,
                                        schedule=StepSchedule([3], 0.2))
    return layers, cost, optimizer


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
