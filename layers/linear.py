"""Linear (y = x @ W) and Bias (y = x + b) layers."""
from ..initializers import Constant, GlorotUniform
from .layer import ParameterLayer, add_row_sums, flat_rows, is_count, prod


class Linear(ParameterLayer):
    """y = x @ W with W (nin, nout).

    Input (N, ...) is flattened to (N, nin) with nin the product of the non-batch axes, except
    a sequence input (N, T, D), which is transformed per token over its last axis to (N, T, nout).
    """

    variable_steps = True  # a sequence input (N, T', D), 1 <= T' <= T

    def __init__(self, nout, init=None, name=None):
        super().__init__(name)
        if not is_count(nout):
            raise ValueError(f"Linear: nout must be a positive int, got {nout!r}")
        self.nout = nout
        self.init = init or GlorotUniform()

    def _configure(self, in_shape):
        if len(in_shape) == 0:
            raise self.shape_error("an input with at least one non-batch axis")
        self.per_token = len(in_shape) == 2
        self.nin = in_shape[-1] if self.per_token else prod(in_shape)
        return (in_shape[0], self.nout) if self.per_token else (self.nout,)

    def _max_steps(self):
        return self.in_shape[0] if self.per_token else None

    def param_shapes(self):
        return [(self.nin, self.nout)]

    def allocate(self):
        super().allocate()
        self.W = self.add_param("W", (self.nin, self.nout), self.init, self.nin, self.nout)

    def fprop(self, x, inference=False):
        return self.fprop_into(x, self.outputs)

    def fprop_into(self, x, out, beta=0.0):
        """out = x @ W + beta * out, out of this layer's output shape (N, ..., nout): a caller
        that adds something to the product (a residual) writes it into ``out`` first and
        passes beta=1, so the GEMM accumulates onto it.  Returns ``out``."""
        self.x = x
        self.be.compound_dot(flat_rows(x, self.nin), self.W.value, flat_rows(out, self.nout),
                             beta=beta)
        return out

    def bprop(self, error):
        x2, e2 = flat_rows(self.x, self.nin), flat_rows(error, self.nout)
        self.be.compound_dot(x2, e2, self.W.grad, beta=1.0, transA=True)
        if self.needs_deltas:
            self.be.compound_dot(e2, self.W.value, flat_rows(self.deltas, self.nin), transB=True)
        return self.deltas


class Bias(ParameterLayer):
    """y = x + b with b (C,) broadcast over every axis but the last (channels / features).

    bprop passes the error through unchanged (no delta buffer of its own)."""

    variable_steps = True  # a sequence input (N, T', C), 1 <= T' <= T

    def __init__(self, init=None, name=None):
        super().__init__(name)
        self.init = init or Constant(0.0)

    def param_shapes(self):
        return [(self.in_shape[-1],)]

    def allocate(self):
        self.outputs = self.be.zeros((self.be.bsz,) + self.out_shape)
        self.channels = self.in_shape[-1]
        self.b = self.add_param("b", (self.channels,), self.init, self.channels, self.channels)
        self.ones = self.be.ones((1, self.be.bsz * prod(self.in_shape[:-1])))

    def fprop(self, x, inference=False):
        self.outputs[:] = x + self.b.value
        return self.outputs

    def bprop(self, error):
        add_row_sums(self.be, self.ones, flat_rows(error, self.channels), self.b.grad)
        return error
