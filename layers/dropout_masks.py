"""Dropout masks keyed by (seed, step, layer, the global index of each sample in the batch),
shared by every layer that drops: the same sample gets the same mask however its batch is split
over processes, and on every backend."""
import zlib

import numpy as np


class KeyedDropoutMixin:
    """Draws inverted-dropout masks from the backend's counter-based Philox stream
    (``be.example_dropout_mask``), keyed by the backend seed, the training step, the layer's
    name and the *global* index of each example (``example_offset`` + row: data-parallel
    training sets the offset of this process's first example).  An example gets the same mask
    whatever the number of processes its batch is split over, and on every backend.

    The model calls ``set_step`` before each training step; without it the step advances by
    one per draw.  Call ``start_dropout_stream`` from ``allocate``.
    """

    example_offset = 0
    step = 0

    def start_dropout_stream(self):
        seed = self.be.rng_seed
        self._dropout_key = int(seed) if seed is not None else \
            int(np.random.SeedSequence().entropy)
        self._dropout_stream = zlib.crc32(str(self.name).encode())

    def set_step(self, step):
        """The training step the next mask belongs to."""
        self.step = int(step)

    def draw_dropout_mask(self, mask, keep, examples=None):
        """Fill ``mask`` ((examples, ...) elements, contiguous) with this step's masks."""
        self.be.example_dropout_mask(mask, keep, self._dropout_key, self.step,
                                     self._dropout_stream, self.example_offset, examples)
        self.step += 1
        return mask
