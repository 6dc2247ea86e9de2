"""LeNet-style CNN train step (conv5x5x32, pool, conv5x5x64+BN, pool, fc512, dropout, fc10),
28x28x1 images, batch 128 (8 in smoke mode); row ``lenet_b32`` (:data:`B32`) the same at batch
32.  Figure: images/s."""
from .common import FixedBatch, random_batch, torch_threads

NAME = "lenet_train"
FIGURE = "images/s"


def _batch(smoke, batch=128):
    return 8 if smoke else batch


def lenet_model():
    """The workload's network, initialized for (28, 28, 1) images and 10 classes on the
    current backend."""
    from neonlite import Model
    from neonlite.initializers import GlorotUniform, Kaiming
    from neonlite.layers import Affine, Conv, Dropout, GeneralizedCost, Pooling
    from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax
    model = Model([Conv((5, 5, 32), padding=2, init=Kaiming(), activation=Rectlin()),
                   Pooling(2, strides=2),
                   Conv((5, 5, 64), padding=2, init=Kaiming(), activation=Rectlin(),
                        batch_norm=True),
                   Pooling(2, strides=2),
                   Affine(512, init=Kaiming(), activation=Rectlin()),
                   Dropout(0.5),
                   Affine(10, init=GlorotUniform(), activation=Softmax())])
    model.initialize(FixedBatch((28, 28, 1), (10,)), GeneralizedCost(CrossEntropyMulti()))
    return model


def neonlite(make_backend, smoke, batch=128):
    from neonlite.optimizers import GradientDescentMomentum
    be = make_backend(_batch(smoke, batch))
    model = lenet_model()
    x, t = random_batch(be, (28, 28, 1), 10)
    opt = GradientDescentMomentum(0.01, momentum_coef=0.9, wdecay=1e-4)
    return (lambda: model.train_step(x, t, opt, 0)), be.bsz


def torch(device, smoke, batch=128):
    torch = torch_threads()
    nn = torch.nn
    n = _batch(smoke, batch)
    model = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 5, padding=2, bias=False), nn.BatchNorm2d(64),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 512),
                          nn.ReLU(), nn.Dropout(0.5), nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.rand(n, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (n,), device=device)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step, n


class _Batch32:
    """The same workload at batch 32 (row ``lenet_b32``): more, smaller steps."""

    NAME = "lenet_b32"
    FIGURE = FIGURE

    @staticmethod
    def neonlite(make_backend, smoke):
        return neonlite(make_backend, smoke, batch=32)

    @staticmethod
    def torch(device, smoke):
        return torch(device, smoke, batch=32)


B32 = _Batch32
