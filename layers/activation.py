"""Activation and Dropout layers (elementwise, shape-preserving)."""
import zlib

import numpy as np

from ..backends.philox import philox4x32_10, seed_key
from ..transforms.activation import Gelu
from .layer import Layer


class Activation(Layer):
    """y = f(x) for a transform ``f`` (``neonlite.transforms``: Rectlin, Logistic, Tanh, Softmax,
    Identity, Gelu).  Softmax acts over the last axis.

    When the cost has fused its gradient with this activation (softmax + cross-entropy,
    logistic + binary cross-entropy) the model sets ``fused_with_cost`` and bprop passes the
    cost's error through unchanged.  GELU runs as the backend's fused ``gelu``/``gelu_bprop``
    (one pass each).
    """

    def __init__(self, transform, name=None):
        super().__init__(name)
        self.transform = transform
        self.fused_with_cost = False

    def fprop(self, x, inference=False):
        self.x = x
        if isinstance(self.transform, Gelu):
            self.be.gelu(x, self.outputs, approximate=self.transform.approximate)
        else:
            self.transform.fprop(self.be, x, self.outputs)
        return self.outputs

    def bprop(self, error):
        if self.fused_with_cost:
            return error
        if isinstance(self.transform, Gelu):
            self.be.gelu_bprop(self.x, error, self.deltas,
                               approximate=self.transform.approximate, y=self.outputs)
        else:
            self.transform.bprop(self.be, self.x, self.outputs, error, self.deltas)
        return self.deltas


class Dropout(Layer):
    """Inverted dropout: training keeps each element with probability ``keep`` and scales it by
    1/keep; inference is the identity.  Setting ``fixed_mask = True`` reuses the current mask on
    later fprops (for gradient checks).

    Masks come from the counter-based Philox generator (:mod:`neonlite.backends.philox`),
    keyed by the backend's seed, the training step (``set_step``: the model sets it before
    each step; otherwise it advances by one per draw), the layer's name and the *global*
    index of each example (``example_offset`` + row: data-parallel training sets the offset of
    this process's first example).  So an example gets the same mask whatever the number of
    processes the global batch is split over.  Row n of the mask, (D,) elements, uses the
    Philox counters ``n * ceil(D / 4) ...``.
    """

    def __init__(self, keep=0.5, name=None):
        super().__init__(name)
        if not 0.0 < keep <= 1.0:
            raise ValueError(f"Dropout: keep must be in (0, 1], got {keep!r}")
        self.keep = float(keep)
        self.fixed_mask = False
        self.example_offset = 0
        self.step = 0

    def allocate(self):
        super().allocate()
        self.mask = self.be.ones((self.be.bsz,) + self.in_shape)
        seed = self.be.rng_seed
        self._key = int(seed) if seed is not None else int(np.random.SeedSequence().entropy)
        self._stream = zlib.crc32(str(self.name).encode())

    def set_step(self, step):
        """The training step the next mask belongs to."""
        self.step = int(step)

    def fprop(self, x, inference=False):
        if inference:
            return x
        if not self.fixed_mask:
            self.mask.set(example_masks(self.mask.shape, self.keep, self._key, self.step,
                                        self._stream, self.example_offset))
            self.step += 1
        self.outputs[:] = x * self.mask
        return self.outputs

    def bprop(self, error):
        if self.needs_deltas:
            self.deltas[:] = error * self.mask
        return self.deltas


def example_masks(shape, keep, key, step, stream, first):
    """Inverted-dropout masks (shape: (N, ...)) of the examples ``first .. first + N - 1``:
    element j of example n keeps (value 1/keep, else 0) when the uniform from word ``j % 4``
    of ``philox4x32_10(counter=(g & 0xffffffff, g >> 32, step, stream), key)``, with
    ``g = n * ceil(D / 4) + j // 4`` and D the elements per example, is below ``keep``."""
    n, per = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    groups = -(-per // 4)
    g = (np.uint64(first) * np.uint64(groups)
         + np.arange(n * groups, dtype=np.uint64)).reshape(-1)
    counter = np.stack([g & np.uint64(0xFFFFFFFF), g >> np.uint64(32),
                        np.full_like(g, step & 0xFFFFFFFF), np.full_like(g, stream)], axis=-1)
    words = philox4x32_10(counter, np.array(seed_key(key), dtype=np.uint64))
    uniform = (words.reshape(n, groups * 4)[:, :per] >> 8).astype(np.float32) * 2.0 ** -24
    return ((uniform < keep) * (1.0 / keep)).reshape(shape)
