"""One batch of an image data set made on the host: decode its files, augment, write the
result into a preallocated array.  The same function runs in the main process
(``num_workers: 0``) and in every loader worker, so the bits of a batch never depend on
where it was made."""
import numpy as np

from .iterator import DataError

#: the most files a batch keeps open between reading their headers and decoding them (the
#: others are opened twice)
KEEP_OPEN = 256
#: the most bytes of JPEG files read whole for their headers (:meth:`Decoder.open`) a batch
#: keeps until their decode (the others are read again)
KEEP_BYTES = 256 << 20


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
        self._rows = RowBuffer()

    def make(self, indices, epoch_key, out):
        """Write the batch of samples ``indices`` (int64 (B,)) into ``out`` ((B, H, W, C),
        the pipeline's output dtype, uint8 without one); returns ``(used, skipped)``: the
        (B,) int64 indices whose labels the batch holds (``indices`` with corrupt images'
        substitutes when ``skip_corrupt``) and how many images were corrupt.  ``current`` is
        the sample being decoded (-1: none), also given to ``on_sample`` (a worker's hook)
        when set."""
        indices = np.array(indices, dtype=np.int64)
        if self.pipeline is not None and self.decoder.decodes_boxes and \
                self.pipeline.resizes_first():
            return self._make_scaled(indices, epoch_key, out)
        images, used = [None] * len(indices), indices.copy()
        bad = []
        for k, i in enumerate(indices):
            try:
                images[k] = self.decoder.decode(self._path(i))
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
            self.pipeline.apply(_stacked(images), indices, epoch_key, out)
        return used, len(bad)

    def _path(self, i):
        """The path of sample ``i``, which becomes ``current`` (and goes to ``on_sample``)."""
        self.current = int(i)
        if self.on_sample is not None:
            self.on_sample(self.current)
        return self.files.path(int(i))

    def _make_scaled(self, indices, epoch_key, out):
        """:meth:`make` for a pipeline that first resizes a box (the decoder's
        ``decodes_boxes``): the boxes are drawn from the images' headers, as they would be
        from the full images, then each file is decoded for its box (only the box, by the JPEG
        kernel; at the scale the box allows with ``jpeg_draft``) and the box mapped into it.
        A corrupt image (``skip_corrupt``) found while decoding makes the batch start again
        without it (its substitute's header stands in)."""
        used, bad, headers, opened = indices.copy(), [], {}, {}
        try:
            return self._plan_and_decode(indices, epoch_key, out, used, bad, headers, opened)
        finally:
            for handle in opened.values():
                handle.close()

    def _plan_and_decode(self, indices, epoch_key, out, used, bad, headers, opened):
        """:meth:`_make_scaled`'s work; ``opened`` holds the files it opened for their
        headers (up to :data:`KEEP_OPEN` of them, holding up to :data:`KEEP_BYTES`) until
        their decode, the caller closes what is left."""
        kept = 0
        while True:
            shapes, found = [None] * len(indices), False
            for k, i in enumerate(used):
                try:
                    if int(i) not in headers:
                        handle = self.decoder.open(self._path(i))
                        headers[int(i)] = handle.image.height, handle.image.width
                        if len(opened) < KEEP_OPEN and kept + handle.held <= KEEP_BYTES:
                            opened[int(i)] = handle
                            kept += handle.held
                        else:
                            handle.close()
                    shapes[k] = headers[int(i)] + (self.decoder.channels,)
                except DataError:
                    if not self.skip_corrupt:
                        raise
                    bad.append(k)
                    found = True
            if found:
                self._substitute(shapes, used, bad)
            planned = self.pipeline.plan(np.array(shapes, np.int64), indices, epoch_key)
            images, boxes = self._decode_boxes(used, planned[0][1], bad, opened)
            if images is not None:
                break
            self._substitute([None if k in bad else 1 for k in range(len(used))], used, bad)
        self.current = -1
        planned[0][1]["box"] = boxes
        self.pipeline.apply(images, indices, epoch_key, out, planned)
        return used, len(bad)

    def _decode_boxes(self, used, params, bad, opened):
        """The images of samples ``used`` decoded for the boxes ``params["box"]`` resized to
        ``params["out"]``, and the boxes in them ((N, 4) int64); (None, None) after adding
        to ``bad`` the positions whose files turned out corrupt (``skip_corrupt``).  A file
        of ``opened`` (sample index -> :meth:`Decoder.open`) is decoded from it, once."""
        images, boxes, found = [], np.array(params["box"], np.int64), False
        rows = self._rows.start()
        for k, i in enumerate(used):
            try:
                image, boxes[k] = self.decoder.decode_box(self._path(i), boxes[k],
                                                          params["out"][k],
                                                          opened.pop(int(i), None), rows)
                images.append(image)
            except DataError:
                if not self.skip_corrupt:
                    raise
                if k not in bad:
                    bad.append(k)
                found = True
        return (None, None) if found else (images, boxes)

    def _substitute(self, images, used, bad):
        good = [k for k in range(len(images)) if images[k] is not None]
        if not good:
            raise DataError(f"{self.files.path(int(used[bad[0]]))}: every image of a batch is "
                            f"corrupt (first: this one); skip_corrupt needs a good image to "
                            f"stand in")
        for k in bad:
            sub = next((g for g in good if g > k), good[0])
            images[k], used[k] = images[sub], used[sub]


class RowBuffer:
    """The memory a batch's decoded boxes are written into, kept from batch to batch (no
    allocation, no page faults once it has grown to the batches' size).  ``start()`` begins
    a batch and returns the allocator :meth:`Decoder.decode_box` takes: each call gives the
    next C-contiguous uint8 array of the shape asked for, from the buffer while it lasts,
    else new memory (and the buffer is that much larger for the next batch)."""

    ALIGN = 64

    def __init__(self):
        self.buffer, self.used, self.short = np.empty(0, np.uint8), 0, 0

    def __getstate__(self):
        return {"buffer": np.empty(0, np.uint8), "used": 0, "short": 0}

    def start(self):
        if self.short:
            self.buffer = np.empty(self.buffer.size + self.short, np.uint8)
        self.used = self.short = 0
        return self.take

    def take(self, shape):
        size = int(np.prod(shape))
        start = -(-self.used // self.ALIGN) * self.ALIGN
        if start + size > self.buffer.size:
            self.short += size + self.ALIGN
            return np.empty(shape, np.uint8)
        self.used = start + size
        return self.buffer[start:start + size].reshape(shape)


def _stacked(images):
    """One uint8 (N, H, W, C) array when every image has one shape, else the list."""
    first = images[0].shape
    if all(image.shape == first for image in images):
        return np.stack(images)
    return images
