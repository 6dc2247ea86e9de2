"""GPT-2 (``model_type: gpt2``): building the neonlite decoder from a config and the names of
its tensors.

The decoder, as layers (names in brackets)::

    Embedding [wte] -> PositionalEmbedding [wpe] (learned, n_positions) -> n_layer x
    TransformerBlock [h<i>] (pre-norm, causal, tanh or exact GELU, biases) -> LayerNorm [ln_f]

then, for ``head="lm"``, TiedLinear [lm_head] (logits through ``wte``'s table, one
parameter); ``head="none"`` ends at the last hidden state (N, T, n_embd).  GPT-2's Conv1D
weights are stored (in, out), neonlite's layout: nothing is transposed; ``c_attn`` holds
[Wq | Wk | Wv] side by side.
"""
from ..initializers import Gaussian
from ..layers import Affine, Embedding, LayerNorm, PositionalEmbedding, TiedLinear, TransformerBlock
from .errors import InteropError
from .hf_config import ConfigReader, gelu_name
from .mapping import Link

HEADS = ("none", "lm")
PREFIXES = ("transformer.",)


def ignored(name):
    """Tensors of a GPT-2 checkpoint that are not parameters: the causal-mask buffers of old
    checkpoints (``h.<i>.attn.bias``, ``h.<i>.attn.masked_bias``).  ``lm_head.weight`` is
    checked separately (it must be the tied ``wte``)."""
    return name.endswith((".attn.bias", ".attn.masked_bias")) and name.startswith("h.")


def build_layers(config, head, where, dropout=0.0):
    """The neonlite layers of the GPT-2 model that ``config`` describes."""
    read = ConfigReader(config, where)
    read.require("add_cross_attention", False, False)
    read.require("scale_attn_weights", True, True)
    read.require("scale_attn_by_inverse_layer_idx", False, False)
    read.require("tie_word_embeddings", True, True)
    vocab, d = read.count("vocab_size"), read.count("n_embd")
    layers, heads = read.count("n_layer"), read.count("n_head")
    hidden = read.count("n_inner") if config.get("n_inner") is not None else 4 * d
    eps = read.number("layer_norm_epsilon", 1e-5, positive=True)
    gelu = read.gelu("activation_function", "gelu_new")
    if d % heads:
        raise InteropError(f"{where}: n_embd={d} is not a multiple of n_head={heads}")
    init = Gaussian(scale=read.number("initializer_range", 0.02))
    out = [Embedding(vocab, d, init=init, name="wte"),
           PositionalEmbedding(read.count("n_positions", 1024), d, init=init, name="wpe")]
    for i in range(layers):
        out.append(TransformerBlock(d, heads, causal=True, dropout=dropout, gelu=gelu,
                                    init=init, eps=eps, fc1=Affine(hidden, init=init),
                                    fc2=Affine(d, init=init), name=f"h{i}"))
    out.append(LayerNorm(eps, name="ln_f"))
    if head == "lm":
        out.append(TiedLinear("wte", name="lm_head"))
    return out


def links(model):
    """The :class:`Link` of every parameter of a GPT-2-form ``model``."""
    top = model.layers.layers
    wte, wpe = top[0], top[1]
    ln_f = next(layer for layer in top[2:] if isinstance(layer, LayerNorm))
    out = [Link("wte.weight", wte.W.name), Link("wpe.weight", wpe.W.name),
           Link("ln_f.weight", ln_f.gamma.name), Link("ln_f.bias", ln_f.beta.name)]
    for i, block in enumerate(b for b in top if isinstance(b, TransformerBlock)):
        hf, attn = f"h.{i}", block.attn
        (fc1, b1), (fc2, b2) = (_affine(block.fc1), _affine(block.fc2))
        out += [Link(f"{hf}.ln_1.weight", block.ln1.gamma.name),
                Link(f"{hf}.ln_1.bias", block.ln1.beta.name),
                Link(f"{hf}.attn.c_attn.weight", [attn.Wq.name, attn.Wk.name, attn.Wv.name]),
                Link(f"{hf}.attn.c_attn.bias", [attn.bq.name, attn.bk.name, attn.bv.name]),
                Link(f"{hf}.attn.c_proj.weight", attn.Wo.name),
                Link(f"{hf}.attn.c_proj.bias", attn.bo.name),
                Link(f"{hf}.ln_2.weight", block.ln2.gamma.name),
                Link(f"{hf}.ln_2.bias", block.ln2.beta.name),
                Link(f"{hf}.mlp.c_fc.weight", fc1.name), Link(f"{hf}.mlp.c_fc.bias", b1.name),
                Link(f"{hf}.mlp.c_proj.weight", fc2.name),
                Link(f"{hf}.mlp.c_proj.bias", b2.name)]
    return out


def _affine(compound):
    if len(compound.layers) != 2:
        raise InteropError(f"layer '{compound.name}' has no bias; GPT-2 has biases in every "
                           f"projection")
    linear, bias = compound.layers
    return linear.W, bias.b


def matches(top):
    """True when the model's top-level layers have the GPT-2 form."""
    kinds = [type(layer) for layer in top]
    if kinds[-1] is TiedLinear:
        kinds = kinds[:-1]
    return len(kinds) > 3 and kinds[:2] == [Embedding, PositionalEmbedding] and \
        kinds[-1] is LayerNorm and all(k is TransformerBlock for k in kinds[2:-1])


def config_for(model, where):
    """The Hugging Face ``config.json`` (dict) of a GPT-2-form neonlite model."""
    top = model.layers.layers
    wte, wpe = top[0], top[1]
    lm = isinstance(top[-1], TiedLinear)
    ln_f = top[-2] if lm else top[-1]
    blocks = [b for b in top if isinstance(b, TransformerBlock)]
    first = blocks[0]
    if lm and top[-1].tied_to != wte.name:
        raise InteropError(f"{where}: layer '{top[-1].name}' is tied to '{top[-1].tied_to}', "
                           f"not to the input embedding '{wte.name}'")
    if wpe.sinusoidal:
        raise InteropError(f"{where}: GPT-2 has learned positions; layer '{wpe.name}' is "
                           f"sinusoidal")
    for block in blocks:
        problems = [(block.norm != "pre", "pre-norm blocks (norm='pre')"),
                    (not block.attn.causal, "causal attention"),
                    (not block.attn.bias or not ln_f.bias or not block.ln1.bias,
                     "biases in every projection and layer norm"),
                    (block.ln1.eps != ln_f.eps, f"one layer-norm eps ({ln_f.eps})"),
                    (block.attn.heads != first.attn.heads or block.attn.dk != wte.d
                     or block.attn.dv != wte.d, "equal heads, dk = dv = n_embd"),
                    (block.gelu.transform.approximate != first.gelu.transform.approximate,
                     "one GELU form")]
        for bad, wanted in problems:
            if bad:
                raise InteropError(f"{where}: block '{block.name}' cannot be exported as "
                                   f"GPT-2: GPT-2 has {wanted}")
    hidden = int(first.fc1.layers[0].W.value.shape[1])
    return {"architectures": ["GPT2LMHeadModel" if lm else "GPT2Model"], "model_type": "gpt2",
            "vocab_size": wte.vocab, "n_positions": wpe.max_len, "n_embd": wte.d,
            "n_layer": len(blocks), "n_head": first.attn.heads,
            "n_inner": None if hidden == 4 * wte.d else hidden,
            "activation_function": gelu_name(first.gelu.transform.approximate),
            "layer_norm_epsilon": ln_f.eps, "resid_pdrop": first.attn.dropout,
            "embd_pdrop": first.attn.dropout, "attn_pdrop": first.attn.dropout,
            "initializer_range": 0.02, "tie_word_embeddings": True,
            "scale_attn_weights": True, "bos_token_id": wte.vocab - 1,
            "eos_token_id": wte.vocab - 1}
