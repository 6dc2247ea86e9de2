"""The op table's rows of softmax, cross-entropy and fused attention (``table.py`` says what a row
holds). Dispatched by the table: ``softmax`` and ``masked_softmax_bprop`` on the CPU
(``kernels/cpu/softmax.c``, ``attention_softmax.c``; the GPU backend runs its own row kernels
and op-trees, ``gpu/softmax.py``). Costs: softmax 5 per element (max, subtract, exp, sum,
divide), its gradient 4, softmax with cross-entropy 7; attention per visible (query, key) pair
``2*dk + 2*dv`` forward and ``6*dk + 4*dv`` backward (``costs.visible_pairs``)."""
from ..operand_shapes import check_attention, check_rows_alike
from ..reference import attention, softmax
from .costs import nbytes, no_flops, size, visible_pairs
from .table import Kernel, Op, Operand, Scalar


def _softmax(x, out, axis=-1):
    return 5.0 * size(x), nbytes(x, out)


def _masked_softmax_bprop(y, dy, dx, scale=1.0):
    return 4.0 * size(y), nbytes(y, dy, dx)


def _rows_alike(op, **operands):
    check_rows_alike(op, None, **operands)


def _last_axis(x, out, axis):
    """softmax_rows works over the last axis."""
    return x.ndim > 0 and axis in (-1, x.ndim - 1)


def _has_rows(y, dy, dx, scale):
    return y.ndim > 0


def _masked_softmax(x, out, scale=1.0, causal=False, key_mask=None):
    return 5.0 * size(x), nbytes(x, out)


def _softmax_cross_entropy(logits, targets, probs, grad, scale=1.0):
    return 7.0 * size(logits), nbytes(logits, targets, probs, grad)


def _attention_pairs(lse, k, causal, blocks, heads):
    """Pairs of every example: lse is (N*heads, Tq) whether q is head-major or token-major."""
    return (lse.shape[0] // heads) * visible_pairs(lse.shape[1], k.shape[1], causal, blocks,
                                                   heads)


def _attention(q, k, v, out, lse, scale, causal=False, key_mask=None, dropout=None, blocks=None,
               heads=1):
    pairs = _attention_pairs(lse, k, causal, blocks, heads)
    return float(pairs * (2 * q.shape[-1] + 2 * v.shape[-1])), nbytes(q, k, v, out, lse)


def _attention_bprop(q, k, v, out, lse, dout, dq, dk, dv, scale, causal=False, key_mask=None,
                     dropout=None, blocks=None, heads=1):
    pairs = _attention_pairs(lse, k, causal, blocks, heads)
    return (float(pairs * (6 * q.shape[-1] + 4 * v.shape[-1])),
            nbytes(q, k, v, out, lse, dout, dq, dk, dv))


F = "softmax"
_ROWS, _SCORES = ("M", "D"), ("M", "T", "D")
ROWS = (
    Op("softmax", F,
       "out = softmax(x) along ``axis`` (max-subtracted, so large logits do not overflow); "
       "x and out of one shape.", _softmax,
       operands=(Operand("x", _ROWS), Operand("out", _ROWS, written=True)),
       scalars=(Scalar("axis", "int", default=-1),), check=_rows_alike,
       reference=softmax.softmax,
       kernel=Kernel("softmax", "softmax_rows", cuda_variant="softmax",
                     arguments=("x", "out", "sizes"), takes=_last_axis),
       cuda_functions=("softmax:nl_softmax_xent",), sample={"M": 6, "D": 11}),
    Op("softmax_cross_entropy", F, "probs, grad of softmax + cross-entropy on logits",
       _softmax_cross_entropy, reference=softmax.softmax_cross_entropy,
       c_symbols=("softmax:softmax_cross_entropy", "softmax:softmax_cross_entropy_index"),
       cuda_functions=("softmax:nl_softmax_xent", "softmax:nl_softmax_xent_index")),
    Op("onehot", F, "out = one-hot rows of class indices", no_flops(0, 1)),
    Op("masked_softmax", F, "attention scores' softmax with causal and key masks",
       _masked_softmax, reference=softmax.masked_softmax,
       c_symbols=("attention_softmax:attention_softmax_fprop",),
       cuda_functions=("softmax:nl_masked_softmax",)),
    Op("masked_softmax_bprop", F,
       "dx = scale * y * (dy - sum(dy * y, last axis)) for y = masked_softmax(...) "
       "(B, Tq, Tk); ``dx`` may be ``dy``.", _masked_softmax_bprop,
       operands=(Operand("y", _SCORES, positive=True), Operand("dy", _SCORES),
                 Operand("dx", _SCORES, written=True)),
       scalars=(Scalar("scale", default=1.0, sample=0.5),), check=_rows_alike,
       reference=softmax.masked_softmax_bprop,
       kernel=Kernel("attention_softmax", "attention_softmax_bprop", cuda_variant="softmax",
                     takes=_has_rows),
       cuda_functions=("codegen:generated",), sample={"M": 4, "T": 3, "D": 11}),
    Op("attention", F, "fused attention on head-major or token-major slices", _attention,
       check=check_attention, reference=attention.attention,
       c_symbols=("flash_attention:fa_fprop",),
       cuda_functions=("flash_attention:nl_fa_fprop*",), backward="attention_bprop",
       bf16_class="attention"),
    Op("attention_bprop", F, "dq, dk, dv of fused attention", _attention_bprop,
       check=check_attention, reference=attention.attention_bprop,
       c_symbols=("flash_attention:fa_bprop",),
       cuda_functions=("flash_attention:nl_fa_bprop_kv*", "flash_attention:nl_fa_bprop_q*"),
       bf16_class="attention"),
)
