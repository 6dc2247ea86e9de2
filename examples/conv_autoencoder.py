"""A convolutional autoencoder in Python: the network of ``conv_autoencoder.yaml`` (the two
describe the same run; ``tests/examples/test_examples.py`` checks it).  Conv + pool down to 8x8, two
stride-2 Deconvs back up, a logistic output and a mean-squared reconstruction cost.

    python examples/conv_autoencoder.py       # same flags as neonlite train: -e 2 -b gpu ...
"""
from neonlite.cli.example import example_main
from neonlite.initializers import GlorotUniform, Kaiming
from neonlite.layers import Conv, Deconv, GeneralizedCost, Pooling
from neonlite.optimizers import Adam
from neonlite.transforms import Logistic, MeanSquared, Rectlin

SETTINGS = {"backend": "cpu", "epochs": 2, "batchsize": 32, "rng_seed": 0, "eval_freq": 1,
            "metric": {"type": "MeanSquaredError"},
            "dataset": {"type": "shapes",
                        "config": {"n": 4000, "size": 32, "seed": 0, "reconstruct": True}}}


def network(channels=3):
    """(layers, cost, optimizer) for images with ``channels`` channels whose sides are
    multiples of 4: 3x3 convs of 16 and 32 channels, each with ReLU and 2x2 max pooling, then
    3x3 stride-2 Deconvs (padding 1, output padding 1) of 16 and ``channels`` channels, ReLU
    then logistic; mean-squared error against the input; Adam 1e-3."""
    layers = [Conv((3, 3, 16), padding=1, init=Kaiming(), activation=Rectlin()),
              Pooling(2),
              Conv((3, 3, 32), padding=1, init=Kaiming(), activation=Rectlin()),
              Pooling(2),
              Deconv((3, 3, 16), strides=2, padding=1, output_padding=1, init=Kaiming(),
                     activation=Rectlin()),
              Deconv((3, 3, channels), strides=2, padding=1, output_padding=1,
                     init=GlorotUniform(), activation=Logistic())]
    return layers, GeneralizedCost(MeanSquared()), Adam(0.001)


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
