"""Containers: Sequential chains, residual MergeSum/SkipNode, and the compound layers
Affine and Conv (core op + bias or batch norm + activation under one name)."""
from ..initializers import Constant
from ..transforms.activation import is_plain_relu
from .activation import Activation
from .conv import Convolution
from .layer import Layer, set_chain_steps
from .linear import Bias, Linear
from .batchnorm import BatchNorm


def _as_layers(layers):
    out = []
    for layer in layers:
        if isinstance(layer, (list, tuple)):
            out.extend(_as_layers(layer))
        elif isinstance(layer, Layer):
            out.append(layer)
        else:
            raise TypeError(f"expected a neonlite layer, got {type(layer).__name__}: {layer!r}")
    return out


class Sequential(Layer):
    """Layers applied one after another; nested lists are flattened."""

    unnamed_description = "the model"
    stepped_buffers = ()  # the layers' own buffers

    def __init__(self, layers, name=None):
        super().__init__(name)
        self.layers = _as_layers(layers)

    def name_children(self):
        prefix = f"{self.name}." if self.name else ""
        for i, layer in enumerate(self.layers):
            if layer.name is None:
                layer.name = f"{prefix}{type(layer).__name__}_{i}"
            layer.name_children()

    def _configure(self, in_shape):
        shape, prev = in_shape, self.prev_name
        for layer in self.layers:
            shape = layer.configure(shape, prev)
            prev = layer.name
        return shape

    def _max_steps(self):
        """Sequences of 1 to T steps when the first layer takes them."""
        return self.layers[0].max_steps if self.layers else None

    def set_steps(self, steps):
        set_chain_steps(self.layers, steps)
        self.steps = steps

    def allocate(self):
        for layer in self.layers:
            layer.allocate()

    def set_needs_deltas(self, needed):
        self.needs_deltas = needed
        if self.layers:
            self.layers[0].set_needs_deltas(needed)

    def fprop(self, x, inference=False):
        """x: a batch (bsz,) + in_shape (checked, as every layer's)."""
        for layer in self.layers:
            x = layer.fprop(x, inference)
        return x

    def bprop(self, error):
        """error: the gradient of the output, (bsz,) + out_shape (checked, as every
        layer's)."""
        for layer in reversed(self.layers):
            error = layer.bprop(error)
        return error

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]

    def leaves(self):
        return [leaf for layer in self.layers for leaf in layer.leaves()]

    @property
    def outputs(self):
        return self.layers[-1].outputs if self.layers else None

    @outputs.setter
    def outputs(self, value):
        pass


class SkipNode(Layer):
    """The identity: a residual block's shortcut branch."""

    variable_steps = True

    def allocate(self):
        pass

    def fprop(self, x, inference=False):
        return x

    def bprop(self, error):
        return error


class MergeSum(Layer):
    """Runs each branch on the same input and sums the branch outputs (a residual block when
    one branch is ``[SkipNode()]`` or a projection).  Every branch must give the same shape."""

    def __init__(self, branches, name=None):
        super().__init__(name)
        self.branches = [b if isinstance(b, Sequential) else
                         Sequential(b if isinstance(b, (list, tuple)) else [b])
                         for b in branches]
        if len(self.branches) < 2:
            raise ValueError("MergeSum needs at least two branches")

    def name_children(self):
        for i, branch in enumerate(self.branches):
            if branch.name is None:
                branch.name = f"{self.name}.branch{i}"
            branch.name_children()

    def _configure(self, in_shape):
        shapes = [b.configure(in_shape, self.prev_name) for b in self.branches]
        for branch, shape in zip(self.branches[1:], shapes[1:]):
            if shape != shapes[0]:
                raise self.shape_error(f"branches with equal output shapes, but "
                                       f"'{self.branches[0].name}' gives {shapes[0]} and "
                                       f"'{branch.name}' gives {shape} (for input")
        return shapes[0]

    def _max_steps(self):
        """Sequences of 1 to T steps when every branch takes them."""
        steps = {branch.max_steps for branch in self.branches}
        return steps.pop() if len(steps) == 1 else None

    def set_steps(self, steps):
        super().set_steps(steps)
        for branch in self.branches:
            branch.set_steps(steps)

    def allocate(self):
        super().allocate()
        for branch in self.branches:
            branch.allocate()

    def set_needs_deltas(self, needed):
        self.needs_deltas = needed
        for branch in self.branches:
            branch.set_needs_deltas(needed)

    def fprop(self, x, inference=False):
        outs = [b.fprop(x, inference) for b in self.branches]
        self.outputs[:] = outs[0] + outs[1]
        for out in outs[2:]:
            self.outputs[:] = self.outputs + out
        return self.outputs

    def bprop(self, error):
        deltas = [b.bprop(error) for b in self.branches]
        if not self.needs_deltas:
            return None
        self.deltas[:] = deltas[0] + deltas[1]
        for d in deltas[2:]:
            self.deltas[:] = self.deltas + d
        return self.deltas

    def parameters(self):
        return [p for b in self.branches for p in b.parameters()]

    def leaves(self):
        return [leaf for b in self.branches for leaf in b.leaves()]


class CompoundLayer(Sequential):
    """A core layer followed by bias or batch norm and an activation, all under one name:
    parameters are ``<name>.W``, ``<name>.b`` or ``<name>.gamma``/``<name>.beta``.  Batch norm
    applies an activation it fuses (a plain ReLU) in its own passes; a core that fuses its own
    bias and activation (``Conv``) is given ``bias=None`` and no activation here."""

    unnamed_description = None

    def __init__(self, core, bias, batch_norm, activation, name=None):
        layers = [core]
        if batch_norm:
            fused = activation is not None and BatchNorm.fuses(activation)
            layers.append(BatchNorm(activation=activation if fused else None))
            activation = None if fused else activation
        elif bias is not None:
            layers.append(Bias(init=bias))
        if activation is not None:
            layers.append(Activation(activation))
        super().__init__(layers, name)

    def name_children(self):
        for layer in self.layers:
            layer.name = self.name

    @property
    def activation(self):
        last = self.layers[-1]
        if isinstance(last, (BatchNorm, Convolution)):
            return last.activation
        return last.transform if isinstance(last, Activation) else None


class Affine(CompoundLayer):
    """Linear (W (nin, nout)) + Bias (b (nout,), or BatchNorm when ``batch_norm``) + activation.
    y = act(x @ W + b)."""

    def __init__(self, nout, init=None, bias=Constant(0.0), activation=None, batch_norm=False,
                 name=None):
        self.nout = nout
        super().__init__(Linear(nout, init), bias, batch_norm, activation, name)


class Conv(CompoundLayer):
    """Convolution (W (R, S, C, K)) + bias (b (K,), or BatchNorm when ``batch_norm``) +
    activation, on NHWC images.  See :class:`Convolution` for fshape/strides/padding/dilation.

    The bias and a plain ReLU run in the convolution's epilogue (no Bias or Activation layer
    of their own); batch norm fuses a plain ReLU instead.  Other activations follow as an
    :class:`Activation` layer."""

    def __init__(self, fshape, strides=1, padding=0, dilation=1, init=None, bias=Constant(0.0),
                 activation=None, batch_norm=False, name=None):
        self.fshape = fshape
        fused_bias = None if batch_norm else bias
        fused_relu = activation if fused_bias is not None and is_plain_relu(activation) else None
        core = Convolution(fshape, strides, padding, dilation, init, bias=fused_bias,
                           activation=fused_relu)
        super().__init__(core, None, batch_norm, None if fused_relu else activation, name)
