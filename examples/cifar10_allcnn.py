"""All-CNN-C with batch norm on CIFAR-10 in Python: the network of ``cifar10_allcnn.yaml``.

    python examples/cifar10_allcnn.py -b gpu --data-dir DIR   # same flags as neonlite train
"""
from neonlite.cli.example import example_main
from neonlite.initializers import Kaiming
from neonlite.layers import Activation, Conv, Dropout, Flatten, GeneralizedCost, Pooling
from neonlite.optimizers import GradientDescentMomentum, StepSchedule
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

SETTINGS = {"backend": "cpu", "epochs": 100, "batchsize": 128, "rng_seed": 0,
            "dataset": "cifar10"}


def conv(channels, size=3, padding=0, strides=None):
    """A conv-BN-ReLU layer (``strides`` left out when 1, as in the YAML)."""
    options = {"padding": padding} if padding else {}
    if strides:
        options["strides"] = strides
    return Conv((size, size, channels), **options, init=Kaiming(), batch_norm=True,
                activation=Rectlin())


def network():
    """(layers, cost, optimizer): stride-2 convolutions instead of pooling, dropout, and a
    global average over a 6x6 map of 10 channels feeding the softmax."""
    layers = [Dropout(keep=0.8),
              conv(96, padding=1), conv(96, padding=1), conv(96, padding=1, strides=2),
              Dropout(keep=0.5),
              conv(192, padding=1), conv(192, padding=1), conv(192, padding=1, strides=2),
              Dropout(keep=0.5),
              conv(192), conv(192, size=1), conv(10, size=1),
              Pooling(6, op="avg"), Flatten(), Activation(transform=Softmax())]
    cost = GeneralizedCost(CrossEntropyMulti())
    optimizer = GradientDescentMomentum(0.05, momentum_coef=0.9, wdecay=0.0005,
                                        schedule=StepSchedule([50, 75], 0.1))
    return layers, cost, optimizer


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
