"""The offline quick start in Python: the network of ``shapes_cnn.yaml``, built with the
Python API (the two describe the same run; ``tests/examples/test_examples.py`` checks it).

    python examples/shapes_cnn.py            # same flags as neonlite train: -b gpu -e 2 ...
"""
from neonlite.cli.example import example_main
from neonlite.initializers import GlorotUniform, Kaiming
from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling
from neonlite.optimizers import Adam, StepSchedule
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

SETTINGS = {"backend": "cpu", "epochs": 4, "batchsize": 32, "rng_seed": 0, "eval_freq": 1,
            "dataset": {"type": "shapes",
                        "config": {"n": 8000, "size": 32, "classes": 8, "seed": 0}}}


def network():
    """(layers, cost, optimizer): three conv-BN-ReLU + 2x2 max-pool stages (16, 32, 64
    channels), a 64-unit BN-ReLU hidden layer and a softmax over the 8 classes; Adam with the
    rate cut to 30% for the last epoch."""
    layers = []
    for channels in (16, 32, 64):
        layers += [Conv((3, 3, channels), padding=1, init=Kaiming(), batch_norm=True,
                        activation=Rectlin()),
                   Pooling(2)]
    layers += [Affine(64, init=Kaiming(), batch_norm=True, activation=Rectlin()),
               Affine(8, init=GlorotUniform(), activation=Softmax())]
    cost = GeneralizedCost(CrossEntropyMulti())
    optimizer = Adam(0.003, schedule=StepSchedule([3], 0.3))
    return layers, cost, optimizer


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
