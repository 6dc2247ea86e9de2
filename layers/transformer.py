"""The transformer block (pre-norm or post-norm) on sequences (N, T, d)."""
from ..initializers import Constant
from ..transforms.activation import Gelu
from .activation import Activation, Dropout
from .attention import MultiHeadAttention
from .containers import Affine
from .decode import DecodeState, decode, init_decode
from .layer import Layer, set_chain_steps
from .layernorm import LayerNorm, RMSNorm
from .linear import Bias, Linear


class TransformerBlock(Layer):
    """A transformer block on x (N, T, d_model), pre-norm (GPT-2 style, the default) or, with
    ``norm="post"``, post-norm (BERT style):

        pre:  r = x + drop(attn(ln1(x)))        y = r + drop(fc2(gelu(fc1(ln2(r)))))
        post: r = ln1(x + drop(attn(x)))        y = ln2(r + drop(fc2(gelu(fc1(r)))))

    Sub-layers, named ``<block name>.<sub-layer>``: ``ln1``, ``attn`` (MultiHeadAttention,
    ``heads`` heads, causal by default), ``ln2``, ``fc1`` (Affine: W (d, mlp_ratio*d), b),
    ``gelu``, ``fc2`` (Affine: W (mlp_ratio*d, d), b); so parameters are e.g.
    ``block0.fc1.W``.  GELU is the exact erf form, or ``gelu="tanh"`` for the tanh
    approximation.  ``dropout`` applies to the attention weights and to both residual
    branches while training.  ``eps`` is the layer norms' epsilon (BERT: 1e-12);
    ``bias=False`` builds every projection and layer norm without a bias (nanoGPT's
    ``bias=False``).  ``norm_type="rms"`` makes ln1 and ln2 RMSNorms (Llama style; no bias
    whatever ``bias`` says) instead of the default LayerNorms (``norm_type="layer"``).

    Pluggable sub-layers: ``attention`` replaces the default attention (e.g. a
    ``BlockSparseAttention``; YAML ``attention: {type: BlockSparseAttention, config: ...}``),
    ``fc1`` / ``fc2`` the default Affines (each a core layer, optionally followed by a Bias,
    e.g. ``BlockSparseAffine``; fc1 gives the hidden features, fc2 d_model).

    Takes sequences (N, T', d_model) of any 1 <= T' <= T (T configured): the block and every
    sub-layer then run on their buffers' views of that length (:meth:`set_steps`).
    """

    variable_steps = True
    stepped_buffers = ("outputs", "sum2", "resid", "dresid", "deltas")

    def __init__(self, d_model, heads, mlp_ratio=4, causal=True, dropout=0.0, gelu="none",
                 init=None, attention=None, fc1=None, fc2=None, norm="pre", eps=1e-5,
                 bias=True, norm_type="layer", name=None):
        super().__init__(name)
        if not isinstance(mlp_ratio, int) or mlp_ratio < 1:
            raise ValueError(f"TransformerBlock: mlp_ratio must be a positive int, got "
                             f"{mlp_ratio!r}")
        if norm not in ("pre", "post"):
            raise ValueError(f"TransformerBlock: norm must be 'pre' or 'post', got {norm!r}")
        if not isinstance(bias, bool):
            raise ValueError(f"TransformerBlock: bias must be true or false, got {bias!r}")
        if norm_type not in ("layer", "rms"):
            raise ValueError(f"TransformerBlock: norm_type must be 'layer' or 'rms', got "
                             f"{norm_type!r}")
        self.d_model, self.norm, self.norm_type = d_model, norm, norm_type
        fc_bias = Constant(0.0) if bias else None
        self.ln1 = LayerNorm(eps, bias=bias) if norm_type == "layer" else RMSNorm(eps)
        self.attn = attention if attention is not None else \
            MultiHeadAttention(d_model, heads, causal=causal, dropout=dropout, init=init,
                               bias=bias)
        self.ln2 = LayerNorm(eps, bias=bias) if norm_type == "layer" else RMSNorm(eps)
        self.fc1 = fc1 if fc1 is not None else Affine(mlp_ratio * d_model, init=init,
                                                      bias=fc_bias)
        self.gelu = Activation(Gelu(gelu))
        self.fc2 = fc2 if fc2 is not None else Affine(d_model, init=init, bias=fc_bias)
        for what, layer in (("attention", self.attn), ("fc1", self.fc1), ("fc2", self.fc2)):
            if not isinstance(layer, Layer):
                raise TypeError(f"TransformerBlock: {what} must be a neonlite layer, got "
                                f"{type(layer).__name__}")
        for what, layer in (("fc1", self.fc1), ("fc2", self.fc2)):
            parts = getattr(layer, "layers", ())
            if not 1 <= len(parts) <= 2 or (len(parts) == 2 and not isinstance(parts[1], Bias)):
                raise TypeError(f"TransformerBlock: {what} must be a core layer + optional Bias "
                                f"compound (an Affine or BlockSparseAffine without activation), "
                                f"got {layer!r}")
        self.drop1 = Dropout(1.0 - dropout) if dropout else None
        self.drop2 = Dropout(1.0 - dropout) if dropout else None
        order = (self.ln1, self.attn, self.drop1, self.ln2, self.fc1, self.gelu, self.fc2,
                 self.drop2) if norm == "pre" else \
            (self.attn, self.drop1, self.ln1, self.fc1, self.gelu, self.fc2, self.drop2, self.ln2)
        self.sublayers = [layer for layer in order if layer is not None]

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
            if layer is self.ln2 and self.norm == "pre":
                shape, prev = in_shape, f"{self.name} (first residual)"
            shape = layer.configure(shape, prev)
            prev = layer.name
        return in_shape

    def allocate(self):
        be = self.be
        for layer in self.sublayers:
            layer.set_needs_deltas(layer is not self.sublayers[0] or self.needs_deltas)
            layer.allocate()
        shape = (be.bsz,) + self.in_shape
        # post-norm: the block's output is ln2's; ``outputs`` is that buffer, ``sum2`` ln2's input
        self.outputs = be.zeros(shape) if self.norm == "pre" else self.ln2.outputs
        self.sum2 = be.zeros(shape) if self.norm == "post" else None
        self.resid, self.dresid = be.zeros(shape), be.zeros(shape)
        self.deltas = be.zeros(shape) if self.needs_deltas else None

    def set_needs_deltas(self, needed):
        self.needs_deltas = needed

    def set_steps(self, steps):
        """The block's buffers and every sub-layer's (the block calls some of their passes
        directly, past their own checks) at ``steps`` steps."""
        if steps == self.steps:
            return
        super().set_steps(steps)
        for layer in self.sublayers:
            set_chain_steps([layer], steps)

    def fprop(self, x, inference=False):
        if self.norm == "post":
            return self._fprop_post(x, inference)
        a = self.attn.fprop(self.ln1.fprop(x, inference), inference)
        if self.drop1 is not None:
            a = self.drop1.fprop(a, inference)
        g = self._fc1_gelu(self.ln2.fprop_joined(x, a, self.resid, inference), inference)
        linear, bias = _core_and_bias(self.fc2)
        if self.drop2 is None and bias is not None:  # the residual plus fc2's bias in one pass
            if isinstance(linear, Linear):  # and fc2's GEMM onto them
                self.outputs[:] = self.resid + bias.b.value
                return linear.fprop_into(g, self.outputs, beta=1.0)
            self.outputs[:] = self.resid + linear.fprop(g, inference) + bias.b.value
            return self.outputs
        m = self.fc2.fprop(g, inference)
        if self.drop2 is not None:
            m = self.drop2.fprop(m, inference)
        self.outputs[:] = self.resid + m
        return self.outputs

    def _fprop_post(self, x, inference):
        """r = ln1(x + drop(attn(x))), y = ln2(r + drop(fc2(gelu(fc1(r))))); ``resid`` holds
        x + drop(attn(x)), ``sum2`` r + drop(mlp), ``outputs`` (ln2's buffer) y."""
        a = self.attn.fprop(x, inference)
        if self.drop1 is not None:
            a = self.drop1.fprop(a, inference)
        r = self.ln1.fprop_joined(x, a, self.resid, inference)
        g = self._fc1_gelu(r, inference)
        linear, bias = _core_and_bias(self.fc2)
        if self.drop2 is None and bias is not None:  # the residual plus fc2's bias in one pass
            if isinstance(linear, Linear):  # and fc2's GEMM onto them
                self.sum2[:] = r + bias.b.value
                linear.fprop_into(g, self.sum2, beta=1.0)
            else:
                self.sum2[:] = r + linear.fprop(g, inference) + bias.b.value
        else:
            m = self.fc2.fprop(g, inference)
            if self.drop2 is not None:
                m = self.drop2.fprop(m, inference)
            self.sum2[:] = r + m
        return self.ln2.fprop(self.sum2, inference)

    def bprop(self, error):
        if self.norm == "post":
            return self._bprop_post(error)
        e = self.drop2.bprop(error) if self.drop2 is not None else error
        self.ln2.bprop_into(self._fc1_gelu_bprop(self.fc2.bprop(e)), self.dresid, error)
        e = self.drop1.bprop(self.dresid) if self.drop1 is not None else self.dresid
        e = self.attn.bprop(e)
        if not self.needs_deltas:
            self.ln1.bprop(e)
            return None
        return self.ln1.bprop_into(e, self.deltas, self.dresid)

    def _bprop_post(self, error):
        e_sum2 = self.ln2.bprop(error)
        e = self.drop2.bprop(e_sum2) if self.drop2 is not None else e_sum2
        self.dresid[:] = e_sum2 + self._fc1_gelu_bprop(self.fc2.bprop(e))
        e_sum1 = self.ln1.bprop(self.dresid)
        e = self.drop1.bprop(e_sum1) if self.drop1 is not None else e_sum1
        e = self.attn.bprop(e)
        if not self.needs_deltas:
            return None
        self.deltas[:] = e_sum1 + e
        return self.deltas

    def _fc1_gelu(self, h, inference):
        """gelu(fc1(h)) with fc1's bias added inside the GELU pass: the GEMM's output
        (N, T, hidden) becomes the pre-activation in place, kept for bprop (in inference the
        sum is not written back)."""
        linear, bias = _core_and_bias(self.fc1)
        z = linear.fprop(h, inference)
        self.be.gelu(z, self.gelu.outputs, None if bias is None else bias.b.value,
                     None if bias is None or inference else z, self.gelu.transform.approximate)
        self.gelu.x = None if inference and bias is not None else z
        return self.gelu.outputs

    def _fc1_gelu_bprop(self, e):
        """The error for fc1's input; the GELU's gradient and fc1's bias gradient in one pass."""
        linear, bias = _core_and_bias(self.fc1)
        self.be.gelu_bprop(self.gelu.x, e, self.gelu.deltas,
                           None if bias is None else bias.b.grad,
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
        if self.norm == "post":
            state.resid[:] = x + decode(self.attn, x, attn)
            r = decode(self.ln1, state.resid, ln1)
            m = decode(self.fc2, decode(self.gelu, decode(self.fc1, r, fc1), gelu), fc2)
            state.out[:] = r + m
            return decode(self.ln2, state.out, ln2)
        a = decode(self.attn, decode(self.ln1, x, ln1), attn)
        state.resid[:] = x + a
        h = decode(self.ln2, state.resid, ln2)
        m = decode(self.fc2, decode(self.gelu, decode(self.fc1, h, fc1), gelu), fc2)
        state.out[:] = state.resid + m
        return state.out


def _core_and_bias(compound):
    """(core layer, its Bias or None) of an fc1/fc2 compound."""
    parts = compound.layers
    return parts[0], (parts[1] if len(parts) == 2 else None)
