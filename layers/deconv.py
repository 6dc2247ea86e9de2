"""Transposed 2-D convolution (``Deconvolution``, and ``Deconv`` with bias and activation) on
NHWC images, run on the convolution kernels: its fprop is a convolution's bprop (data
gradient), its bprop a convolution's fprop plus the filter gradient."""
from ..initializers import Constant, Kaiming
from ..transforms.activation import Identity, Logistic, Rectlin, Tanh
from .containers import CompoundLayer
from .conv import _pair
from .layer import ParameterLayer, flat_rows

# Activations whose derivative follows from the output alone (Rectlin's from its sign), so
# the layer keeps no pre-activation copy.
FUSABLE = (Rectlin, Logistic, Tanh, Identity)


class Deconvolution(ParameterLayer):
    """O (N, P, Q, K) = conv_transpose(I (N, H, W, C), W (R, S, K, C)).

    ``fshape`` is (R, S, K) (filter height, width, output channels); ``strides``, ``padding``,
    ``output_padding`` and ``dilation`` are ints or (h, w) pairs, with

        P = (H - 1) * stride - 2 * pad + dil * (R - 1) + output_padding + 1   (likewise Q)

    as ``torch.nn.ConvTranspose2d``, whose weight (C, K, R, S) is this W transposed by
    (2, 3, 1, 0).  The filters are those of the convolution from (P, Q, K) to (H, W, C) this
    is the transpose of (``conv_layer(N, K, P, Q, C, R, S, ...)``): output_padding must be
    smaller than the stride (otherwise that convolution would not give back H x W).

    ``bias`` (an initializer, or None) and ``activation`` (None, Rectlin, Logistic, Tanh or
    Identity) run in one pass over the output after the transposed convolution, and their
    gradients in one pass before its bprop (``Deconv`` puts them here).
    """

    def __init__(self, fshape, strides=1, padding=0, output_padding=0, dilation=1, init=None,
                 name=None, bias=None, activation=None):
        super().__init__(name)
        if len(tuple(fshape)) != 3:
            raise ValueError(f"Deconv: fshape must be (R, S, K) = (height, width, output "
                             f"channels), got {fshape!r}")
        self.fshape = tuple(int(f) for f in fshape)
        self.strides, self.padding = strides, padding
        self.output_padding, self.dilation = output_padding, dilation
        self.init = init or Kaiming()
        if activation is not None and not isinstance(activation, FUSABLE):
            raise ValueError(f"Deconvolution: activation must be one of Rectlin, Logistic, Tanh "
                             f"or Identity to run in its pass, got {activation!r}")
        self.bias_init, self.activation = bias, activation

    def _configure(self, in_shape):
        if len(in_shape) != 3:
            raise self.shape_error("an NHWC image input (H, W, C)")
        H, W, C = in_shape
        R, S, K = self.fshape
        stride = _pair(self.strides, "strides", self.name)
        pad = _pair(self.padding, "padding", self.name, minimum=0)
        extra = _pair(self.output_padding, "output_padding", self.name, minimum=0)
        dil = _pair(self.dilation, "dilation", self.name)
        for axis, e, s in zip("hw", extra, stride):
            if not 0 <= e < s:
                raise ValueError(f"layer '{self.name}' (Deconvolution): output_padding must be "
                                 f"in [0, stride) on each axis, got {e} with stride {s} "
                                 f"(axis {axis})")
        P = (H - 1) * stride[0] - 2 * pad[0] + dil[0] * (R - 1) + extra[0] + 1
        Q = (W - 1) * stride[1] - 2 * pad[1] + dil[1] * (S - 1) + extra[1] + 1
        if P < 1 or Q < 1:
            raise self.shape_error(f"an input a {R}x{S} transposed filter with padding {pad} "
                                   f"can grow (it gives {P}x{Q})")
        self.plan = self.be.conv_layer(self.be.bsz, K, P, Q, C, R, S, pad, stride, dil)
        assert (self.plan.P, self.plan.Q) == (H, W)
        return (P, Q, K)

    def param_shapes(self):
        R, S, K = self.fshape
        return [(R, S, K, self.in_shape[2])] + ([] if self.bias_init is None else [(K,)])

    def allocate(self):
        super().allocate()
        if self.deltas is None:
            # bprop's convolution always runs: the filter gradient reuses its patches
            self.deltas = self.be.zeros((self.be.bsz,) + self.in_shape)
        R, S, K = self.fshape
        C = self.in_shape[2]
        self.W = self.add_param("W", (R, S, K, C), self.init, R * S * C, R * S * K)
        self.b = None if self.bias_init is None else self.add_param("b", (K,), self.bias_init,
                                                                     K, K)
        self.act_error = self.be.zeros(self.outputs.shape) if self.activation else None

    def fprop(self, x, inference=False):
        self.x = x
        out = self.outputs
        self.be.bprop_conv(self.plan, self.W.value, x, out)
        pre = out if self.b is None else out + self.b.value
        if self.activation is not None:
            self.activation.fprop(self.be, pre, out)
        elif self.b is not None:
            out[:] = pre
        return out

    def bprop(self, error):
        if self.activation is not None:
            self.activation.bprop(self.be, self.outputs, self.outputs, error, self.act_error)
            error = self.act_error
        if self.b is not None:
            K = self.fshape[2]
            b2 = self.b.grad.reshape(1, K)
            b2[:] = b2 + self.be.sum(flat_rows(error, K), axis=0)
        self.be.fprop_conv(self.plan, error, self.W.value, self.deltas)
        self.be.update_conv(self.plan, error, self.x, self.W.grad, beta=1.0)
        return self.deltas


class Deconv(CompoundLayer):
    """Deconvolution (W (R, S, K, C)) + bias (b (K,), or BatchNorm when ``batch_norm``) +
    activation, on NHWC images: the decoder half of a convolutional autoencoder.  See
    :class:`Deconvolution` for the shapes and arguments.  Without batch norm the bias and a
    Rectlin/Logistic/Tanh/Identity activation run inside the Deconvolution's own passes."""

    def __init__(self, fshape, strides=1, padding=0, output_padding=0, dilation=1, init=None,
                 bias=Constant(0.0), activation=None, batch_norm=False, name=None):
        self.fshape = fshape
        fused = not batch_norm and (activation is None or isinstance(activation, FUSABLE))
        core = Deconvolution(fshape, strides, padding, output_padding, dilation, init,
                             bias=bias if fused else None,
                             activation=activation if fused else None)
        super().__init__(core, None if fused else bias, batch_norm,
                         None if fused else activation, name)
