"""Layer normalization and RMSNorm over the last axis (features of each token / example)."""
from ..initializers import Constant
from .decode import DecodeState
from .layer import FixedTensor, ParameterLayer, flat_rows


class LayerNorm(ParameterLayer):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta, with mean and (biased) var taken over
    the last axis of each row: a sequence (N, T, D) is normalized per token.  Parameters
    ``gamma``, ``beta`` (D,); with ``bias=False`` no ``beta`` (y = gamma * xhat, as in
    GPT-2-style recipes without biases).  No running statistics (training and inference
    agree).  ``eps``: BERT uses 1e-12."""

    variable_steps = True  # per token: a sequence (N, T', D) of 1 <= T' <= T steps
    stepped_buffers = ("outputs", "deltas", "xhat", "invstd")

    def __init__(self, eps=1e-5, bias=True, name=None):
        super().__init__(name)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"LayerNorm: eps must be a number > 0, got {eps!r}")
        if not isinstance(bias, bool):
            raise ValueError(f"LayerNorm: bias must be true or false, got {bias!r}")
        self.eps, self.bias = float(eps), bias

    def _configure(self, in_shape):
        if len(in_shape) == 0:
            raise self.shape_error("an input with a feature axis")
        return in_shape

    def param_shapes(self):
        D = self.in_shape[-1]
        return [(D,), (D,)] if self.bias else [(D,)]

    def _allocate_rows(self):
        """The outputs, deltas, xhat, one invstd per row and ``gamma``."""
        be = self.be
        self.D = self.in_shape[-1]
        self.outputs = be.zeros((be.bsz,) + self.out_shape)
        self.deltas = be.zeros((be.bsz,) + self.in_shape)
        self.xhat = be.zeros((be.bsz,) + self.in_shape)
        self.invstd = be.zeros((self.xhat.size // self.D, 1))
        self.gamma = self.add_param("gamma", (self.D,), Constant(1.0), self.D, self.D)

    def allocate(self):
        self._allocate_rows()
        be = self.be
        if self.bias:
            self.beta = self.add_param("beta", (self.D,), Constant(0.0), self.D, self.D)
        else:  # a constant zero shift and a scratch gradient, neither learned nor saved
            self.beta = FixedTensor(be, (self.D,))

    def _row(self, t):
        return t.reshape(1, self.D)

    def _forward(self, x, y, xhat, invstd, residual=None, total=None):
        """y = the norm of x (or of x + residual, written into total); xhat None: not kept."""
        D = self.D
        joined = {} if residual is None else \
            {"residual": flat_rows(residual, D), "total": flat_rows(total, D)}
        self.be.layernorm_fprop(flat_rows(x, D), self._row(self.gamma.value),
                                self._row(self.beta.value), flat_rows(y, D),
                                None if xhat is None else flat_rows(xhat, D), invstd, self.eps,
                                **joined)
        return y

    def fprop(self, x, inference=False):
        return self._forward(x, self.outputs, None if inference else self.xhat, self.invstd)

    def fprop_joined(self, x, residual, total, inference=False):
        """Normalizes x + residual, writing that sum into ``total`` (all of the input's shape;
        total shares no memory with the others) in the same pass: a pre-norm block's residual
        add.  Returns the output.  In inference xhat (bprop's input) is not written."""
        return self._forward(x, self.outputs, None if inference else self.xhat, self.invstd,
                             residual, total)

    def bprop(self, error):
        return self.bprop_into(error, self.deltas)

    def bprop_into(self, error, out, residual=None):
        """out (the input's shape) = the input gradient, plus ``residual`` (that shape, sharing
        no memory with ``error`` or ``out``) when given: a pre-norm block joins its residual
        branch's gradient in the same pass.  Returns ``out``."""
        D = self.D
        self.be.layernorm_bprop(flat_rows(error, D), flat_rows(self.xhat, D), self.invstd,
                                self._row(self.gamma.value), flat_rows(out, D),
                                self._row(self.gamma.grad), self._row(self.beta.grad),
                                None if residual is None else flat_rows(residual, D))
        return out

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        state = DecodeState(self.be, batch, max_len)
        shape = (batch, 1) + self.in_shape[1:]
        state.out, state.xhat = self.be.zeros(shape), self.be.zeros(shape)
        state.invstd = self.be.zeros((state.out.size // self.D, 1))
        return state

    def decode(self, x, state):
        return self._forward(x, state.out, state.xhat, state.invstd)


class RMSNorm(LayerNorm):
    """RMSNorm, the norm of Llama-style transformers: y = gamma * x / sqrt(mean(x^2) + eps),
    the mean taken over the last axis of each row; no mean subtracted, no shift
    (``torch.nn.RMSNorm`` with a given eps).  Parameter ``gamma`` (D,); ``invstd`` holds the
    rows' 1 / rms.  Runs the backend's ``rmsnorm_fprop`` / ``rmsnorm_bprop``, which join a
    pre-norm block's residual add as layer norm's do (``fprop_joined``, ``bprop_into``)."""

    def __init__(self, eps=1e-5, name=None):
        ParameterLayer.__init__(self, name)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"RMSNorm: eps must be a number > 0, got {eps!r}")
        self.eps, self.bias = float(eps), False

    def allocate(self):
        self._allocate_rows()

    def _forward(self, x, y, xhat, invstd, residual=None, total=None):
        D = self.D
        joined = {} if residual is None else \
            {"residual": flat_rows(residual, D), "total": flat_rows(total, D)}
        self.be.rmsnorm_fprop(flat_rows(x, D), self._row(self.gamma.value), flat_rows(y, D),
                              None if xhat is None else flat_rows(xhat, D), invstd, self.eps,
                              **joined)
        return y

    def bprop_into(self, error, out, residual=None):
        D = self.D
        self.be.rmsnorm_bprop(flat_rows(error, D), flat_rows(self.xhat, D), self.invstd,
                              self._row(self.gamma.value), flat_rows(out, D),
                              self._row(self.gamma.grad),
                              None if residual is None else flat_rows(residual, D))
        return out
