"""Local response normalization across channels (AlexNet's LRN)."""
from .layer import Layer, flat_rows


class LRN(Layer):
    """y = x / (k + alpha / depth * sum of x^2 over ``depth`` neighbouring channels)^beta,
    over the last axis (channels of NHWC images; any input with channels last), as
    ``torch.nn.LocalResponseNorm(depth, alpha, beta, k)``: the window of channel c runs from
    c - depth//2 to c + (depth-1)//2, missing channels counting 0.  A buffer keeps the
    denominator's base (N, ..., C) for bprop."""

    def __init__(self, depth=5, alpha=1e-4, beta=0.75, k=1.0, name=None):
        super().__init__(name)
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"LRN: depth must be a positive int, got {depth!r}")
        if k <= 0 or alpha < 0:
            raise ValueError(f"LRN: k must be positive and alpha non-negative, got k={k!r}, "
                             f"alpha={alpha!r}")
        self.depth, self.alpha, self.beta, self.k = depth, float(alpha), float(beta), float(k)

    def _configure(self, in_shape):
        if len(in_shape) == 0:
            raise self.shape_error("an input with a channel axis")
        return in_shape

    def allocate(self):
        super().allocate()
        self.scale = self.be.zeros(self.outputs.shape)

    def fprop(self, x, inference=False):
        self.x = x
        C = self.in_shape[-1]
        self.be.lrn_fprop(flat_rows(x, C), flat_rows(self.outputs, C), flat_rows(self.scale, C),
                          self.depth, self.alpha, self.beta, self.k)
        return self.outputs

    def bprop(self, error):
        if self.needs_deltas:
            C = self.in_shape[-1]
            self.be.lrn_bprop(flat_rows(self.x, C), flat_rows(self.scale, C),
                              flat_rows(error, C), flat_rows(self.deltas, C), self.depth,
                              self.alpha, self.beta)
        return self.deltas
