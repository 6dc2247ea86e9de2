"""2-D convolution on NHWC images with (R, S, C, K) filters."""
from ..initializers import Kaiming
from ..transforms.activation import is_plain_relu
from .layer import ParameterLayer, flat_rows


def _pair(value, what, layer):
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, dict):
        return (value.get("h", value.get("r")), value.get("w", value.get("s")))
    value = tuple(value)
    if len(value) != 2:
        raise ValueError(f"layer '{layer}': {what} must be an int or a pair, got {value!r}")
    return value


class Convolution(ParameterLayer):
    """O (N, P, Q, K) = conv(I (N, H, W, C), W (R, S, C, K)), with an optional bias and ReLU
    fused into the convolution's epilogue.

    ``fshape`` is (R, S, K) (filter height, width, output channels); ``strides``, ``padding``
    and ``dilation`` are ints or (h, w) pairs.  P = (H + 2*pad - dil*(R-1) - 1) // stride + 1.

    ``bias``: an initializer for a bias b (K,) added in the epilogue (None: no bias).
    ``activation``: None or a plain ReLU (``Rectlin()``), applied in the epilogue after the
    bias; bprop masks the error by O > 0 before the bias and filter gradients.  ``Conv`` puts
    its bias and ReLU here, so a conv + bias + ReLU is one pass over the output instead of
    three.
    """

    def __init__(self, fshape, strides=1, padding=0, dilation=1, init=None, name=None,
                 bias=None, activation=None):
        super().__init__(name)
        if len(tuple(fshape)) != 3:
            raise ValueError(f"Conv: fshape must be (R, S, K) = (height, width, output "
                             f"channels), got {fshape!r}")
        if activation is not None and not is_plain_relu(activation):
            raise ValueError(f"Convolution: activation must be a plain ReLU (Rectlin with slope "
                             f"0) to fuse into the convolution, got {activation!r}")
        self.fshape = tuple(int(f) for f in fshape)
        self.strides, self.padding, self.dilation = strides, padding, dilation
        self.init = init or Kaiming()
        self.bias_init, self.activation = bias, activation

    def _configure(self, in_shape):
        if len(in_shape) != 3:
            raise self.shape_error("an NHWC image input (H, W, C)")
        H, W, C = in_shape
        R, S, K = self.fshape
        try:
            self.plan = self.be.conv_layer(self.be.bsz, C, H, W, K, R, S,
                                           _pair(self.padding, "padding", self.name),
                                           _pair(self.strides, "strides", self.name),
                                           _pair(self.dilation, "dilation", self.name))
        except ValueError as err:
            raise self.shape_error(f"an input that a {R}x{S} filter fits ({err})") from None
        return (self.plan.P, self.plan.Q, K)

    def allocate(self):
        super().allocate()
        R, S, K = self.fshape
        C = self.in_shape[2]
        self.W = self.add_param("W", (R, S, C, K), self.init, R * S * C, R * S * K)
        self.b = None if self.bias_init is None else self.add_param("b", (K,), self.bias_init,
                                                                     K, K)
        self.relu_error = self.be.zeros(self.outputs.shape) if self.activation else None

    def fprop(self, x, inference=False):
        self.x = x
        self.be.fprop_conv(self.plan, x, self.W.value, self.outputs,
                           bias=None if self.b is None else self.b.value,
                           relu=self.activation is not None)
        return self.outputs

    def bprop(self, error):
        if self.activation is not None:
            self.relu_error[:] = error * (self.outputs > 0.0)
            error = self.relu_error
        if self.b is not None:
            K = self.fshape[2]
            b2 = self.b.grad.reshape(1, K)
            b2[:] = b2 + self.be.sum(flat_rows(error, K), axis=0)
        self.be.update_conv(self.plan, self.x, error, self.W.grad, beta=1.0)
        if self.needs_deltas:
            self.be.bprop_conv(self.plan, self.W.value, error, self.deltas)
        return self.deltas
