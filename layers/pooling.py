"""Max and average pooling on NHWC images."""
from .conv import _pair
from .layer import Layer


class Pooling(Layer):
    """(N, H, W, C) -> (N, P, Q, C) by max or average over R x S windows.

    ``fshape`` is an int or (R, S); ``strides`` defaults to the window (no overlap) and may be
    smaller (overlapping windows); padded positions never win a max and are not counted in an
    average.
    """

    def __init__(self, fshape, strides=None, padding=0, op="max", name=None):
        super().__init__(name)
        if op not in ("max", "avg"):
            raise ValueError(f"Pooling: op must be 'max' or 'avg', got {op!r}")
        _pair(fshape, "fshape", name)
        if strides is not None:
            _pair(strides, "strides", name)
        _pair(padding, "padding", name, minimum=0)
        self.fshape, self.strides, self.padding, self.op = fshape, strides, padding, op

    def _configure(self, in_shape):
        if len(in_shape) != 3:
            raise self.shape_error("an NHWC image input (H, W, C)")
        H, W, C = in_shape
        R, S = _pair(self.fshape, "fshape", self.name)
        strides = _pair(self.strides, "strides", self.name) if self.strides else (R, S)
        try:
            self.plan = self.be.pool_layer(self.op, self.be.bsz, C, H, W, R, S,
                                           _pair(self.padding, "padding", self.name, 0), strides)
        except ValueError as err:
            raise self.shape_error(f"an input that a {R}x{S} window fits ({err})") from None
        return (self.plan.P, self.plan.Q, C)

    def fprop(self, x, inference=False):
        self.be.fprop_pool(self.plan, x, self.outputs)
        return self.outputs

    def bprop(self, error):
        if self.needs_deltas:
            self.be.bprop_pool(self.plan, error, self.deltas)
        return self.deltas
