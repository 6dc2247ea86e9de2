"""ImageFolder: a data set of the user's own PNG and JPEG files, one subfolder per class or a
manifest, with a held-out split, augmentation and background loading."""
from pathlib import Path

import numpy as np

from .augment import CenterCrop, Pipeline, Resize, pipeline_from_config
from .dataset import SplitDataset
from .datadir import resolve_data_dir
from .image_batch import BatchMaker
from .image_decode import Decoder, pillow
from .image_files import ImageFiles, list_folder, read_manifest, split_fraction
from .image_iterator import ImageIterator
from .iterator import DataError

#: Pillow modes decoded as one channel (grayscale); every other mode is decoded as RGB
GREY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F")


def _folder_in(data_dir):
    """Where a relative ``root`` is looked for after the run's folder: the data root."""
    return [resolve_data_dir(data_dir)]


class ImageFolder(SplitDataset):
    """Images of classes, from a folder or a manifest (see ``docs/data.md``).

    Arguments:
        root: a folder holding ``train/<class>/`` and ``valid/<class>/`` (the simplest
            layout), or one subfolder per class directly (hold some out with ``valid`` or
            ``valid_fraction``).  Classes are the subfolders' names, sorted; the label map is
            ``classes``.  Files are ``.png``, ``.jpg`` or ``.jpeg``; hidden names are skipped.
        manifest: instead of ``root``, a CSV or TSV file of ``path,label`` lines (paths
            relative to its folder), as aeon's.
        valid: the held-out set: a second class folder, or a manifest when ``manifest`` is
            used.
        valid_fraction: instead of ``valid``, the fraction of each class held out (chosen
            by a fixed seed, the same every run).
        size: [H, W]: every image resized (shorter side to min(H, W), bilinear) and centre
            cropped to H x W before the augmentation.  Without it (and without an
            augmentation that ends at a fixed size) the images must all be of one size,
            which sets the input shape.
        channels: 1 (grayscale) or 3 (RGB); None: the first image's (grayscale stays 1).
        augment: the training augmentation, a list of ops (:mod:`neonlite.data.augment`:
            ``pad_crop``, ``flip``, ``random_resized_crop``, ``resize``, ``center_crop``,
            ``color_jitter``, ``normalize``); validation uses its deterministic form.
        num_workers: loader processes decoding ahead of training (0: in this process).
        prefetch: batches each worker makes ahead.
        worker_timeout: seconds a worker may make no progress before the run stops.
        skip_corrupt: replace an image that cannot be decoded by another of its batch (and
            count it) instead of stopping with an error naming it.
        jpeg_draft: decode a JPEG at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling) when the
            first op cuts a box that it shrinks by at least that much (``random_resized_crop``,
            ``resize``, ``size``); the boxes are drawn as from the full image, the pixels
            differ slightly from a full decode's (``docs/data.md``).  False: every pixel is
            decoded (the exact bits of a full decode).
    """

    name = "image_folder"
    #: the options that name folders or files, looked for in the run's folder then these
    file_options = {"root": _folder_in, "manifest": _folder_in, "valid": _folder_in}
    #: those of them that may name a folder
    folder_options = ("root", "valid")

    def __init__(self, root=None, manifest=None, valid=None, valid_fraction=None, size=None,
                 channels=None, augment=None, num_workers=2, prefetch=2,
                 worker_timeout=120.0, skip_corrupt=False, jpeg_draft=True, path=None,
                 shuffle=True):
        pillow()
        self.shuffle, self._iters = shuffle, {}
        self._check_options(root, manifest, valid, valid_fraction, num_workers, prefetch,
                            worker_timeout)
        self.options = dict(num_workers=int(num_workers), prefetch=int(prefetch),
                            worker_timeout=float(worker_timeout))
        self.skip_corrupt = bool(skip_corrupt)
        if not isinstance(jpeg_draft, bool):
            raise DataError(f"image_folder: jpeg_draft must be true or false, got "
                            f"{jpeg_draft!r}")
        self.jpeg_draft = jpeg_draft
        self.files = self._list(root, manifest, valid, valid_fraction)
        self.folder = Path(root if root is not None else manifest)
        self.classes = self.files["train"].classes
        self.nclass = len(self.classes)
        self.train_pipeline = _with_size(size, pipeline_from_config(augment, "augment"))
        self.channels = channels if channels is not None else self._first_channels()
        self.image_shape = self._image_shape()
        self.shape = self.train_pipeline.out_shape(self.image_shape) \
            if self.train_pipeline.ops else self.image_shape

    @staticmethod
    def _check_options(root, manifest, valid, valid_fraction, num_workers, prefetch,
                       worker_timeout):
        if (root is None) == (manifest is None):
            raise DataError("image_folder: give exactly one of root (a folder of class "
                            "folders) and manifest (a CSV/TSV of path,label lines)")
        if valid is not None and valid_fraction is not None:
            raise DataError("image_folder: give valid (a second folder) or valid_fraction, "
                            "not both")
        for name, value, low in (("num_workers", num_workers, 0), ("prefetch", prefetch, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 64:
                raise DataError(f"image_folder: {name} must be an integer in [{low}, 64], got "
                                f"{value!r}")
        if isinstance(worker_timeout, bool) or not isinstance(worker_timeout, (int, float)) \
                or not 0 < worker_timeout <= 86400:
            raise DataError(f"image_folder: worker_timeout must be a number of seconds in "
                            f"(0, 86400], got {worker_timeout!r}")

    def _list(self, root, manifest, valid, valid_fraction):
        if manifest is not None:
            train = read_manifest(manifest)
            held = None if valid is None else read_manifest(valid, train.classes)
        elif (Path(root) / "train").is_dir():
            train = list_folder(Path(root) / "train")
            valid = valid if valid is not None or valid_fraction is not None or \
                not (Path(root) / "valid").exists() else Path(root) / "valid"
            held = None if valid is None else list_folder(valid, train.classes)
        else:
            train = list_folder(root)
            held = None if valid is None else list_folder(valid, train.classes)
        if len(train.classes) < 2:
            raise DataError(f"{train.source}: one class ({train.classes[0]!r}); a classifier "
                            f"needs at least 2")
        if valid_fraction is not None:
            train, held = split_fraction(train, valid_fraction)
        return {"train": train, "valid": held}

    def _first_channels(self):
        mode = Decoder(3).header(self.files["train"].path(0))[2]
        return 1 if mode in GREY_MODES else 3

    def _image_shape(self):
        """(H, W, C) of every image, or (None, None, C) when the pipeline brings images of
        any size to one; DataError naming two files of different sizes otherwise."""
        probe, first, first_path = Decoder(self.channels), None, None
        mixed = (None, None, self.channels)
        try:
            self.train_pipeline.out_shape(mixed)
        except DataError:
            pass
        else:
            path = self.files["train"].path(0)
            self.train_pipeline.out_shape(probe.header(path)[:2] + (self.channels,))
            return mixed
        for files in filter(None, self.files.values()):
            for i in range(len(files)):
                h, w, _ = probe.header(files.path(i))
                if first is None:
                    first, first_path = (h, w), files.path(i)
                elif (h, w) != first:
                    raise DataError(f"{files.path(i)}: the image is {h}x{w} but "
                                    f"{first_path} is {first[0]}x{first[1]}; images of "
                                    f"different sizes need size: [H, W] or an augment ending "
                                    f"in a fixed size (center_crop, random_resized_crop)")
        return first + (self.channels,)

    def _make_iterator(self, which):
        files = self.files[which]
        if files is None:
            raise DataError(f"{self.folder}: no validation images: add a valid/ folder beside "
                            f"train/, or set valid or valid_fraction")
        pipeline = self.train_pipeline if which == "train" else \
            self.train_pipeline.evaluation()
        size = None if self.image_shape[0] is None else self.image_shape[:2]
        decoder = Decoder(self.channels, size, " (set size: [H, W] to resize them)",
                          self.jpeg_draft)
        maker = BatchMaker(files, decoder, pipeline if pipeline.ops else None,
                           self.skip_corrupt)
        return ImageIterator(maker, self.shape, self.nclass,
                             shuffle=self.shuffle and which == "train",
                             name=f"{self.name} {which}", **self.options)

    def input_paths(self):
        return [Path(f.source) for f in self.files.values() if f is not None]

    def close(self):
        """Stop the loader workers of both iterators."""
        for iterator in self._iters.values():
            iterator.close()


def images_for_prediction(config, in_shape, paths):
    """The images ``paths`` as a network trained on image folder ``config`` (the YAML
    ``dataset.config``) takes them: decoded with its channels, brought to its size and
    augmented in evaluation form (deterministic); (N,) + ``in_shape``, uint8 (scaled by
    1/255 on the way in) or float when the augmentation normalises.  DataError naming the
    file for an image that does not fit."""
    pillow()
    in_shape = tuple(in_shape)
    pipeline = _with_size(config.get("size"),
                          pipeline_from_config(config.get("augment"), "augment")).evaluation()
    files = ImageFiles(paths, [0] * len(paths), ("?",), "the images to predict")
    decoder = Decoder(config.get("channels") or in_shape[-1],
                      jpeg_draft=config.get("jpeg_draft", True) is not False)
    maker = BatchMaker(files, decoder, pipeline if pipeline.ops else None)
    dtype = pipeline.out_dtypes()[0]
    out = np.empty((len(paths),) + in_shape, dtype)
    for i, path in enumerate(paths):
        image = decoder.decode(path)
        shape = pipeline.out_shape(image.shape) if pipeline.ops else image.shape
        if tuple(shape) != in_shape:
            raise DataError(f"{path}: the image ({'x'.join(map(str, image.shape))}) becomes "
                            f"{'x'.join(map(str, shape))}, but the network takes "
                            f"{'x'.join(map(str, in_shape))}")
        maker.make(np.array([i]), 0, out[i:i + 1])
    return out


def _with_size(size, pipeline):
    """``pipeline`` (training form) after the ops that bring every image to ``size`` [H, W]
    (none for None)."""
    if size is None:
        return pipeline
    return Pipeline(_sized(size) + pipeline.ops, pipeline.train, pipeline.path,
                    pipeline.use_kernels)


def _sized(size):
    """The ops that bring every image to ``size`` [H, W]."""
    if not isinstance(size, (list, tuple)) or len(size) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 16 for v in size):
        raise DataError(f"image_folder: size must be [H, W], two integers in [1, 65536], got "
                        f"{size!r}")
    return [Resize(min(size)), CenterCrop(list(size))]
