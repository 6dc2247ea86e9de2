"""Activation and Dropout layers (elementwise, shape-preserving)."""
from ..transforms.activation import Gelu
from .dropout_masks import KeyedDropoutMixin
from .layer import Layer


class Activation(Layer):
    """y = f(x) for a transform ``f`` (``neonlite.transforms``: Rectlin, Logistic, Tanh, Softmax,
    Identity, Gelu).  Softmax acts over the last axis.

    When the cost has fused its gradient with this activation (softmax + cross-entropy,
    logistic + binary cross-entropy) the model sets ``fused_with_cost`` and bprop passes the
    cost's error through unchanged.  As a model's first layer (no error wanted for the
    input) bprop computes nothing.  GELU runs as the backend's fused ``gelu``/``gelu_bprop``
    (one pass each).
    """

    variable_steps = True  # elementwise: a sequence (N, T', ...) of 1 <= T' <= T steps

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
        if not self.needs_deltas:
            return None
        if isinstance(self.transform, Gelu):
            self.be.gelu_bprop(self.x, error, self.deltas,
                               approximate=self.transform.approximate, y=self.outputs)
        else:
            self.transform.bprop(self.be, self.x, self.outputs, error, self.deltas)
        return self.deltas


class Dropout(KeyedDropoutMixin, Layer):
    """Inverted dropout: training keeps each element with probability ``keep`` and scales it by
    1/keep; inference is the identity.  Setting ``fixed_mask = True`` reuses the current mask on
    later fprops (for gradient checks).

    Masks are per global example (:class:`KeyedDropoutMixin`): the same for an example
    whatever the number of processes the global batch is split over, and on every backend.
    """

    variable_steps = True  # elementwise: a sequence (N, T', ...) of 1 <= T' <= T steps
    stepped_buffers = ("outputs", "deltas", "mask")

    def __init__(self, keep=0.5, name=None):
        super().__init__(name)
        if not 0.0 < keep <= 1.0:
            raise ValueError(f"Dropout: keep must be in (0, 1], got {keep!r}")
        self.keep = float(keep)
        self.fixed_mask = False

    def allocate(self):
        super().allocate()
        self.mask = self.be.ones((self.be.bsz,) + self.in_shape)
        self.start_dropout_stream()

    def fprop(self, x, inference=False):
        if inference:
            return x
        if not self.fixed_mask:
            self.draw_dropout_mask(self.mask, self.keep)
        self.outputs[:] = x * self.mask
        return self.outputs

    def bprop(self, error):
        if self.needs_deltas:
            self.deltas[:] = error * self.mask
        return self.deltas

