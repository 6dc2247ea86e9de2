"""ResNet-20 (CIFAR shape: 32x32x3, three stages of three basic blocks at 16/32/64 channels,
1x1 stride-2 projections, global average pooling, 10 classes) train step, batch 128, bfloat16
with float32 master weights, SGD with momentum; against eager PyTorch (channels-last,
``torch.autocast`` bfloat16).  Figure: images/s.  GPU only (``--backend gpu``); smoke: batch 4."""
import numpy as np

from .common import FixedBatch

NAME = "resnet20_bf16"
FIGURE = "images/s"


def _batch(smoke):
    return 4 if smoke else 128


def _model():
    from neonlite import Model
    from neonlite.initializers import GlorotUniform, Kaiming
    from neonlite.layers import Activation, Affine, Conv, MergeSum, Pooling, SkipNode
    from neonlite.transforms import Rectlin, Softmax

    def block(channels, stride):
        main = [Conv((3, 3, channels), strides=stride, padding=1, init=Kaiming(),
                     batch_norm=True, activation=Rectlin()),
                Conv((3, 3, channels), padding=1, init=Kaiming(), batch_norm=True)]
        side = [SkipNode()] if stride == 1 else [Conv((1, 1, channels), strides=stride,
                                                      init=Kaiming(), batch_norm=True)]
        return [MergeSum([main, side]), Activation(Rectlin())]

    layers = [Conv((3, 3, 16), padding=1, init=Kaiming(), batch_norm=True,
                   activation=Rectlin())]
    for channels, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            layers += block(channels, stride if i == 0 else 1)
    layers += [Pooling(8, op="avg"), Affine(10, init=GlorotUniform(), activation=Softmax())]
    return Model(layers)


def neonlite(make_backend, smoke):
    from neonlite import gen_backend
    from neonlite.layers import GeneralizedCost
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.optimizers.mixed_precision import for_datatype
    from neonlite.transforms import CrossEntropyMulti
    be = gen_backend("gpu", batch_size=_batch(smoke), rng_seed=0, datatype="bf16")
    model = _model()
    opt = for_datatype(GradientDescentMomentum(0.1, momentum_coef=0.9, wdecay=1e-4), "bf16")
    model.initialize(FixedBatch((32, 32, 3), (10,)),
                     opt.wrap_cost(GeneralizedCost(CrossEntropyMulti())))
    rng = np.random.default_rng(0)
    x = be.array(rng.random((be.bsz, 32, 32, 3), dtype=np.float32))
    t = np.zeros((be.bsz, 10), np.float32)
    t[np.arange(be.bsz), rng.integers(0, 10, be.bsz)] = 1
    t = be.array(t)
    return (lambda: model.train_step(x, t, opt, 0)), be.bsz


def torch(device, smoke):
    import torch
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.main = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.side = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return torch.relu(self.main(x) + self.side(x))

    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            layers.append(Block(cin, cout, stride if i == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    model = nn.Sequential(*layers).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    n = _batch(smoke)
    x = torch.rand(n, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (n,), device=device)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return step, n
