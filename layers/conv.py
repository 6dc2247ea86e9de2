"""2-D convolution on NHWC images with (R, S, C, K) filters."""
from ..initializers import Kaiming
from ..transforms.activation import is_plain_relu
from ..config.errors import short_repr
from .layer import ParameterLayer, add_row_sums, flat_rows, is_count, prod


def _pair(value, what, layer, minimum=1):
    """(height, width) of an int, a pair or a {h, w} mapping, each an integer >= ``minimum``
    (0 for padding); ValueError naming ``what`` otherwise."""
    if isinstance(value, dict):
        pair = (value.get("h", value.get("r")), value.get("w", value.get("s")))
    elif is_count(value, minimum):
        pair = (value, value)
    else:
        pair = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if len(pair) != 2 or not all(is_count(v, minimum) for v in pair):
        raise ValueError(f"layer '{layer}': {what} must be an integer >= {minimum} or a pair of "
                         f"them, got {short_repr(value)}")
    return tuple(int(v) for v in pair)


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
        if not isinstance(fshape, (list, tuple)) or len(fshape) != 3 or \
                not all(is_count(f) for f in fshape):
            raise ValueError(f"Conv: fshape must be (R, S, K) = (height, width, output "
                             f"channels), three integers >= 1, got {short_repr(fshape)}")
        _pair(strides, "strides", name)
        _pair(padding, "padding", name, minimum=0)
        _pair(dilation, "dilation", name)
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
                                           _pair(self.padding, "padding", self.name, 0),
                                           _pair(self.strides, "strides", self.name),
                                           _pair(self.dilation, "dilation", self.name))
        except ValueError as err:
            raise self.shape_error(f"an input that a {R}x{S} filter fits ({err})") from None
        return (self.plan.P, self.plan.Q, K)

    def param_shapes(self):
        R, S, K = self.fshape
        return [(R, S, self.in_shape[2], K)] + ([] if self.bias_init is None else [(K,)])

    def allocate(self):
        super().allocate()
        R, S, K = self.fshape
        C = self.in_shape[2]
        self.W = self.add_param("W", (R, S, C, K), self.init, R * S * C, R * S * K)
        self.b = None if self.bias_init is None else self.add_param("b", (K,), self.bias_init,
                                                                     K, K)
        self.relu_error = self.be.zeros(self.outputs.shape) if self.activation else None
        # the bias gradient's ones row, as a Bias layer after an unfused conv has it
        self.ones = None if self.b is None else \
            self.be.ones((1, self.be.bsz * prod(self.out_shape[:-1])))

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
            add_row_sums(self.be, self.ones, flat_rows(error, self.fshape[2]), self.b.grad)
        self.be.update_conv(self.plan, self.x, error, self.W.grad, beta=1.0)
        if self.needs_deltas:
            self.be.bprop_conv(self.plan, self.W.value, error, self.deltas)
        return self.deltas
