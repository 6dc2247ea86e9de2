"""One batch of an image data set made on the host: decode its files, augment, write the
result into a preallocated array.  The same function runs in the main process
(``num_workers: 0``) and in every loader worker, so the bits of a batch never depend on
where it was made."""
import numpy as np

from .iterator import DataError


class BatchMaker:
    """Makes batches of ``files`` (:class:`~.image_files.ImageFiles`) with ``decoder``
    (:class:`~.image_decode.Decoder`) and ``pipeline`` (an augmentation pipeline of
    :mod:`neonlite.data.augment`, or None: images copied as decoded, all of the output's
    size).  ``skip_corrupt``: an image that cannot be decoded is replaced by the next good
    image of its batch (its label too) instead of ending the run."""

    def __init__(self, files, decoder, pipeline, skip_corrupt=False):
        self.files, self.decoder, self.pipeline = files, decoder, pipeline
        self.skip_corrupt = bool(skip_corrupt)
        self.current = -1
        self.on_sample = None

    def make(self, indices, epoch_key, out):
        """Write the batch of samples ``indices`` (int64 (B,)) into ``out`` ((B, H, W, C),
        the pipeline's output dtype, uint8 without one); returns ``(used, skipped)``: the
        (B,) int64 indices whose labels the batch holds (``indices`` with corrupt images'
        substitutes when ``skip_corrupt``) and how many images were corrupt.  ``current`` is
        the sample being decoded (-1: none), also given to ``on_sample`` (a worker's hook)
        when set."""
        images, used = [None] * len(indices), np.array(indices, dtype=np.int64)
        bad = []
        for k, i in enumerate(indices):
            self.current = int(i)
            if self.on_sample is not None:
                self.on_sample(self.current)
            try:
                images[k] = self.decoder.decode(self.files.path(int(i)))
            except DataError:
                if not self.skip_corrupt:
                    raise
                bad.append(k)
        self.current = -1
        if bad:
            self._substitute(images, used, bad)
        if self.pipeline is None:
            for k, image in enumerate(images):
                if image.shape != out.shape[1:]:
                    raise DataError(f"{self.files.path(int(used[k]))}: the image is "
                                    f"{image.shape[0]}x{image.shape[1]}x{image.shape[2]} but "
                                    f"the data set's are {'x'.join(map(str, out.shape[1:]))}")
                out[k] = image
        else:
            self.pipeline.apply(_stacked(images), np.asarray(indices, dtype=np.int64),
                                epoch_key, out)
        return used, len(bad)

    def _substitute(self, images, used, bad):
        good = [k for k in range(len(images)) if images[k] is not None]
        if not good:
            raise DataError(f"{self.files.path(int(used[bad[0]]))}: every image of a batch is "
                            f"corrupt (first: this one); skip_corrupt needs a good image to "
                            f"stand in")
        for k in bad:
            sub = next((g for g in good if g > k), good[0])
            images[k], used[k] = images[sub], used[sub]


def _stacked(images):
    """One uint8 (N, H, W, C) array when every image has one shape, else the list."""
    first = images[0].shape
    if all(image.shape == first for image in images):
        return np.stack(images)
    return images
