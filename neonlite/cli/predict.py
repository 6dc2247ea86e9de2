"""``neonlite predict CKPT.h5 IMAGE...``: a classifier trained on an image folder names the
classes of image files (the label map its checkpoint holds)."""
import numpy as np

from ..backends import available_backends
from ..config.errors import ConfigError
from ..data.image_folder import images_for_prediction
from ..model import Model
from ..serialize import read_checkpoint
from .arguments import batch_size, positive_int
from .session import make_backend

HELP = "name the classes of image files with a classifier trained on an image folder"


def register(subparsers):
    parser = subparsers.add_parser("predict", help=HELP, description=HELP)
    parser.add_argument("checkpoint", metavar="CKPT.h5")
    parser.add_argument("images", metavar="IMAGE", nargs="+",
                        help="PNG or JPEG files, read as the training images were (size, "
                             "channels, evaluation form of the augmentation)")
    parser.add_argument("--top", type=positive_int, default=1, metavar="K",
                        help="print the K likeliest classes of each image (default 1)")
    parser.add_argument("-b", "--backend", choices=available_backends(),
                        help="backend (default: the checkpoint's, else cpu)")
    parser.add_argument("-z", "--batch-size", type=batch_size, dest="batchsize",
                        metavar="BATCH", help="minibatch size (default: 32)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show a traceback with errors")
    parser.set_defaults(func=command)


def command(args):
    ckpt = read_checkpoint(args.checkpoint)
    config, classes = ckpt.config, ckpt.classes
    dataset = config.get("dataset")
    if not isinstance(dataset, dict) or dataset.get("type") != "image_folder" or \
            classes is None:
        raise ConfigError(f"{args.checkpoint}: not a classifier trained on an image folder "
                          f"(its checkpoint holds no class names)")
    images = images_for_prediction(dataset.get("config") or {}, ckpt.in_shape, args.images)
    make_backend({"backend": args.backend or config.get("backend", "cpu"),
                  "batchsize": args.batchsize or 32, "rng_seed": config.get("rng_seed"),
                  "datatype": config.get("datatype", "f32")})
    model = Model.from_checkpoint(ckpt)
    outputs = model.predict(images).reshape(len(args.images), -1)
    if outputs.shape[1] < len(classes):
        raise ConfigError(f"{args.checkpoint}: the network has {outputs.shape[1]} outputs for "
                          f"{len(classes)} classes")
    top = min(args.top, len(classes))
    for path, row in zip(args.images, outputs[:, :len(classes)]):
        best = np.argsort(-row, kind="stable")[:top]
        print(f"{path}\t" + "\t".join(f"{classes[k]} {row[k]:.4f}" for k in best))
