"""ResNet-20 on CIFAR-10 in Python: the network and recipe of ``cifar10_resnet.yaml`` (pad-4
crop, flip, the paper's schedule in epochs: 82, 123 and 164 for its 32k, 48k and 64k
iterations), with the residual blocks built by a loop.

    python examples/cifar10_resnet.py -b gpu --data-dir DIR   # same flags as neonlite train
"""
from neonlite.cli.example import example_main
from neonlite.initializers import GlorotUniform, Kaiming
from neonlite.layers import (Activation, Affine, Conv, GeneralizedCost, MergeSum, Pooling,
                             Sequential, SkipNode)
from neonlite.optimizers import GradientDescentMomentum, StepSchedule
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

AUGMENT = [{"type": "pad_crop", "config": {"size": 32, "pad": 4}}, {"type": "flip"},
           {"type": "normalize", "config": {"mean": [0.4914, 0.4822, 0.4465],
                                            "std": [0.2470, 0.2435, 0.2616]}}]
SETTINGS = {"backend": "cpu", "epochs": 164, "batchsize": 128, "rng_seed": 0,
            "dataset": {"type": "cifar10", "config": {"augment": AUGMENT}}}


def residual_block(channels, downsample):
    """MergeSum of [conv-BN-ReLU, conv-BN] and the shortcut (the identity, or a 1x1 stride-2
    conv-BN projection when ``downsample``), then ReLU."""
    first = {"strides": 2} if downsample else {}
    main = [Conv((3, 3, channels), padding=1, **first, init=Kaiming(), batch_norm=True,
                 activation=Rectlin()),
            Conv((3, 3, channels), padding=1, init=Kaiming(), batch_norm=True)]
    shortcut = [Conv((1, 1, channels), strides=2, init=Kaiming(), batch_norm=True)] \
        if downsample else [SkipNode()]
    return Sequential(layers=[MergeSum(branches=[main, shortcut]),
                              Activation(transform=Rectlin())])


def network(blocks_per_stage=3):
    """(layers, cost, optimizer): ResNet-(6n+2) with n = ``blocks_per_stage`` (3: ResNet-20)."""
    layers = [Conv((3, 3, 16), padding=1, init=Kaiming(), batch_norm=True,
                   activation=Rectlin())]
    for stage, channels in enumerate((16, 32, 64)):
        for block in range(blocks_per_stage):
            layers.append(residual_block(channels, downsample=stage > 0 and block == 0))
    layers += [Pooling(8, op="avg"),
               Affine(10, init=GlorotUniform(), activation=Softmax())]
    cost = GeneralizedCost(CrossEntropyMulti())
    optimizer = GradientDescentMomentum(0.1, momentum_coef=0.9, wdecay=0.0001,
                                        schedule=StepSchedule([82, 123], 0.1))
    return layers, cost, optimizer


if __name__ == "__main__":
    raise SystemExit(example_main(network, SETTINGS, __doc__))
