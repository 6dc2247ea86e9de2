"""Inception blocks on Shapes in Python: the network of ``inception_shapes.yaml`` (the two
describe the same run; ``tests/examples/test_examples.py`` checks it).  Each block runs 1x1, 3x3 and
5x5 convolution branches and a 3x3 max-pool + 1x1 branch on the same input and concatenates
their channels (``MergeBroadcast``).

    python examples/inception_shapes.py       # same flags as neonlite train: -e 2 -b gpu ...
"""
from neonlite.cli.example import example_main
from neonlite.initializers import GlorotUniform, Kaiming
from neonlite.layers import Affine, Conv, GeneralizedCost, MergeBroadcast, Pooling
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

SETTINGS = {"backend": "cpu", "epochs": 3, "batchsize": 32, "rng_seed": 0, "eval_freq": 1,
            "dataset": {"type": "shapes",
                        "config": {"n": 6000, "size": 32, "classes": 8, "seed": 0}}}


def inception(c1, c3r, c3, c5r, c5, cp):
    """One GoogLeNet block: 1x1 (c1); 1x1 (c3r) then 3x3 (c3); 1x1 (c5r) then 5x5 (c5);
    3x3 max pool then 1x1 (cp); concatenated: c1 + c3 + c5 + cp channels."""
    def conv(shape, padding=None):
        extra = {} if padding is None else {"padding": padding}
        return Conv(shape, init=Kaiming(), activation=Rectlin(), **extra)
    return MergeBroadcast([[conv((1, 1, c1))],
                           [conv((1, 1, c3r)), conv((3, 3, c3), 1)],
                           [conv((1, 1, c5r)), conv((5, 5, c5), 2)],
                           [Pooling(3, strides=1, padding=1, op="max"), conv((1, 1, cp))]],
                          merge="concat")


def network():
    """(layers, cost, optimizer): a 3x3 stem of 16 channels and 2x2 pool, two inception
    blocks (32 and 48 channels) with 2x2 pools, average pooling over the 4x4 map and a softmax
    over the 8 classes; Adam 2e-3."""
    layers = [Conv((3, 3, 16), padding=1, init=Kaiming(), batch_norm=True,
                   activation=Rectlin()),
              Pooling(2),
              inception(8, 8, 12, 4, 6, 6),
              Pooling(2),
              inception(12, 12, 16, 6, 10, 10),
              Pooling(2),
              Pooling(4, op="avg"),
              Affine(8, init=GlorotUniform(), activation=Softmax())]
    return layers, GeneralizedCost(CrossEntropyMulti()), Adam(0.002)


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
