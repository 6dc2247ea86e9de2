"""Flatten and Reshape: views, no copies."""
from .layer import Layer, prod


class Reshape(Layer):
    """Reshape each example to ``reshape`` (no batch axis; one entry may be -1)."""

    def __init__(self, reshape, name=None):
        super().__init__(name)
        self.reshape = tuple(reshape)

    def _configure(self, in_shape):
        shape = list(self.reshape)
        total = prod(in_shape)
        if shape.count(-1) > 1:
            raise self.shape_error(f"a target shape with at most one -1 (got {self.reshape})")
        if -1 in shape:
            known = prod([s for s in shape if s != -1])
            if known == 0 or total % known:
                raise self.shape_error(f"a size divisible by {known} to reshape to {self.reshape}")
            shape[shape.index(-1)] = total // known
        if prod(shape) != total:
            raise self.shape_error(f"{prod(shape)} elements per example to reshape to "
                                   f"{self.reshape}")
        return tuple(shape)

    def allocate(self):
        pass

    def fprop(self, x, inference=False):
        return x.reshape((x.shape[0],) + self.out_shape)

    def bprop(self, error):
        return error.reshape((error.shape[0],) + self.in_shape)


class Flatten(Reshape):
    """(N, ...) -> (N, prod(...))."""

    def __init__(self, name=None):
        super().__init__((-1,), name)
