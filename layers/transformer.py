"""The pre-norm transformer block on sequences (N, T, d)."""
from ..transforms.activation import Gelu
from .activation import Activation, Dropout
from .attention import MultiHeadAttention
from .containers import Affine
from .decode import DecodeState, decode, init_decode
from .layer import Layer
from .layernorm import LayerNorm
from .linear import Bias, Linear


class TransformerBlock(Layer):
    """A pre-norm transformer block (GPT-2 style) on x (N, T, d_model):

        r = x + drop(attn(ln1(x)))
        y = r + drop(fc2(gelu(fc1(ln2(r)))))

    Sub-layers, named ``<block name>.<sub-layer>``: ``ln1``, ``attn`` (MultiHeadAttention,
    ``heads`` heads, causal by default), ``ln2``, ``fc1`` (Affine: W (d, mlp_ratio*d), b),
    ``gelu``, ``fc2`` (Affine: W (mlp_ratio*d, d), b); so parameters are e.g.
    ``block0.fc1.W``.  GELU is the exact erf form, or ``gelu="tanh"`` for the tanh
    approximation.  ``dropout`` applies to the attention weights and to both residual
    branches while training.

    Pluggable sub-layers: ``attention`` replaces the default attention (e.g. a
    ``BlockSparseAttention``; YAML ``attention: {type: BlockSparseAttention, config: ...}``),
    ``fc1`` / ``fc2`` the default Affines (each a compound of a core layer and a Bias, e.g.
    ``BlockSparseAffine``; fc1 gives mlp_ratio*d_model features, fc2 d_model).
    """

    def __init__(self, d_model, heads, mlp_ratio=4, causal=True, dropout=0.0, gelu="none",
                 init=None, attention=None, fc1=None, fc2=None, name=None):
        super().__init__(name)
        if not isinstance(mlp_ratio, int) or mlp_ratio < 1:
            raise ValueError(f"TransformerBlock: mlp_ratio must be a positive int, got "
                             f"{mlp_ratio!r}")
        self.d_model = d_model
        self.ln1 = LayerNorm()
        self.attn = attention if attention is not None else \
            MultiHeadAttention(d_model, heads, causal=causal, dropout=dropout, init=init)
        self.ln2 = LayerNorm()
        self.fc1 = fc1 if fc1 is not None else Affine(mlp_ratio * d_model, init=init)
        self.gelu = Activation(Gelu(gelu))
        self.fc2 = fc2 if fc2 is not None else Affine(d_model, init=init)
        for what, layer in (("attention", self.attn), ("fc1", self.fc1), ("fc2", self.fc2)):
            if not isinstance(layer, Layer):
                raise TypeError(f"TransformerBlock: {what} must be a neonlite layer, got "
                                f"{type(layer).__name__}")
        for what, layer in (("fc1", self.fc1), ("fc2", self.fc2)):
            if len(getattr(layer, "layers", ())) != 2 or not isinstance(layer.layers[1], Bias):
                raise TypeError(f"TransformerBlock: {what} must be a core layer + Bias compound "
                                f"(an Affine or BlockSparseAffine without activation), got "
                                f"{layer!r}")
        self.drop1 = Dropout(1.0 - dropout) if dropout else None
        self.drop2 = Dropout(1.0 - dropout) if dropout else None
        self.sublayers = [layer for layer in (self.ln1, self.attn, self.drop1, self.ln2,
                                              self.fc1, self.gelu, self.fc2, self.drop2)
                          if layer is not None]

    def name_children(self):
        for attr in ("ln1", "attn", "drop1", "ln2", "fc1", "gelu", "fc2", "drop2"):
            layer = getattr(self, attr)
            if layer is not None:
                layer.name = f"{self.name}.{attr}"
                layer.name_children()

    def _configure(self, in_shape):
        if len(in_shape) != 2 or in_shape[1] != self.d_model:
            raise self.shape_error(f"a sequence (T, {self.d_model})")
        shape, prev = in_shape, self.prev_name
        for layer in self.sublayers:
            if layer is self.ln2:
                shape, prev = in_shape, f"{self.name} (first residual)"
            shape = layer.configure(shape, prev)
            prev = layer.name
        return in_shape

    def allocate(self):
        be = self.be
        for layer in self.sublayers:
            layer.set_needs_deltas(layer is not self.ln1 or self.needs_deltas)
            layer.allocate()
        shape = (be.bsz,) + self.in_shape
        self.outputs = be.zeros(shape)
        self.resid, self.dresid = be.zeros(shape), be.zeros(shape)
        self.deltas = be.zeros(shape) if self.needs_deltas else None

    def set_needs_deltas(self, needed):
        self.needs_deltas = needed

    def fprop(self, x, inference=False):
        a = self.attn.fprop(self.ln1.fprop(x, inference), inference)
        if self.drop1 is not None:
            a = self.drop1.fprop(a, inference)
        g = self._fc1_gelu(self.ln2.fprop_joined(x, a, self.resid), inference)
        if self.drop2 is None:
            linear, bias = self.fc2.layers
            if isinstance(linear, Linear):  # the residual plus fc2's bias, the GEMM onto them
                self.outputs[:] = self.resid + bias.b.value
                return linear.fprop_into(g, self.outputs, beta=1.0)
            self.outputs[:] = self.resid + linear.fprop(g, inference) + bias.b.value
            return self.outputs
        m = self.drop2.fprop(self.fc2.fprop(g, inference), inference)
        self.outputs[:] = self.resid + m
        return self.outputs

    def bprop(self, error):
        e = self.drop2.bprop(error) if self.drop2 is not None else error
        self.ln2.bprop_into(self._fc1_gelu_bprop(self.fc2.bprop(e)), self.dresid, error)
        e = self.drop1.bprop(self.dresid) if self.drop1 is not None else self.dresid
        e = self.attn.bprop(e)
        if not self.needs_deltas:
            self.ln1.bprop(e)
            return None
        return self.ln1.bprop_into(e, self.deltas, self.dresid)

    def _fc1_gelu(self, h, inference):
        """gelu(fc1(h)) with fc1's bias added inside the GELU pass: the GEMM's output
        (N, T, mlp_ratio*d) becomes the pre-activation in place, kept for bprop."""
        linear, bias = self.fc1.layers
        z = linear.fprop(h, inference)
        self.be.gelu(z, self.gelu.outputs, bias.b.value, z, self.gelu.transform.approximate)
        self.gelu.x = z
        return self.gelu.outputs

    def _fc1_gelu_bprop(self, e):
        """The error for fc1's input; the GELU's gradient and fc1's bias gradient in one pass."""
        linear, bias = self.fc1.layers
        self.be.gelu_bprop(self.gelu.x, e, self.gelu.deltas, bias.b.grad,
                           self.gelu.transform.approximate, self.gelu.outputs)
        return linear.bprop(self.gelu.deltas)

    def parameters(self):
        return [p for layer in self.sublayers for p in layer.parameters()]

    def leaves(self):
        return [leaf for layer in self.sublayers for leaf in layer.leaves()]

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        layers = (self.ln1, self.attn, self.ln2, self.fc1, self.gelu, self.fc2)
        state = DecodeState(self.be, batch, max_len,
                            [init_decode(layer, batch, max_len) for layer in layers])
        state.resid = self.be.zeros((batch, 1, self.d_model))
        state.out = self.be.zeros((batch, 1, self.d_model))
        return state

    def decode(self, x, state):
        """x (B, 1, d_model) -> (B, 1, d_model), extending the attention's key/value cache."""
        ln1, attn, ln2, fc1, gelu, fc2 = state.children
        a = decode(self.attn, decode(self.ln1, x, ln1), attn)
        state.resid[:] = x + a
        h = decode(self.ln2, state.resid, ln2)
        m = decode(self.fc2, decode(self.gelu, decode(self.fc1, h, fc1), gelu), fc2)
        state.out[:] = state.resid + m
        return state.out
