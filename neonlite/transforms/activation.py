"""Activation functions as op-trees: ``fprop(be, x, out)`` writes f(x); ``bprop(be, x, y, dy,
dx)`` writes dx = dy * f'(x) (y = f(x) is given so a derivative can reuse it)."""
from ..backends.shared import gelu


class Transform:
    def fprop(self, be, x, out):
        raise NotImplementedError

    def bprop(self, be, x, y, dy, dx):
        raise NotImplementedError

    def get_description(self):
        return {"type": type(self).__name__, "config": dict(self._config())}

    def _config(self):
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"


class Identity(Transform):
    """f(x) = x."""

    def fprop(self, be, x, out):
        out[:] = x

    def bprop(self, be, x, y, dy, dx):
        dx[:] = dy


class Rectlin(Transform):
    """f(x) = max(x, 0) + slope * min(x, 0) (ReLU; leaky when slope > 0)."""

    def __init__(self, slope=0.0):
        self.slope = float(slope)

    def fprop(self, be, x, out):
        if self.slope:
            out[:] = be.maximum(x, 0.0) + self.slope * be.minimum(x, 0.0)
        else:
            out[:] = be.maximum(x, 0.0)

    def bprop(self, be, x, y, dy, dx):
        if self.slope:
            dx[:] = dy * ((x > 0.0) + self.slope * (x <= 0.0))
        else:
            dx[:] = dy * (x > 0.0)

    def _config(self):
        return {"slope": self.slope} if self.slope else {}


def is_plain_relu(transform):
    """True for max(x, 0) itself (``Rectlin()`` with slope 0): the activation batch norm and
    convolution apply in their own passes instead of a separate layer."""
    return isinstance(transform, Rectlin) and not transform.slope


class Logistic(Transform):
    """f(x) = 1 / (1 + exp(-x))."""

    def fprop(self, be, x, out):
        out[:] = be.sig(x)

    def bprop(self, be, x, y, dy, dx):
        dx[:] = dy * y * (1.0 - y)


class Tanh(Transform):
    """f(x) = tanh(x)."""

    def fprop(self, be, x, out):
        out[:] = be.tanh(x)

    def bprop(self, be, x, y, dy, dx):
        dx[:] = dy * (1.0 - y * y)


class Softmax(Transform):
    """f(x)_i = exp(x_i) / sum_j exp(x_j) over the last axis."""

    def fprop(self, be, x, out):
        be.softmax(x, out, axis=-1)

    def bprop(self, be, x, y, dy, dx):
        dx[:] = y * (dy - be.sum(dy * y, axis=-1))




class Gelu(Transform):
    """GELU: x * Phi(x), exact erf form by default, or the tanh approximation
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with ``approximate="tanh"``."""

    def __init__(self, approximate="none"):
        gelu.check_approximate(approximate, "Gelu")
        self.approximate = approximate

    def fprop(self, be, x, out):
        gelu.fprop(be, x, out, self.approximate)

    def bprop(self, be, x, y, dy, dx):
        gelu.bprop(be, x, dy, dx, self.approximate)

    def _config(self):
        return {} if self.approximate == "none" else {"approximate": self.approximate}
