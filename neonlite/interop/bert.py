"""BERT (``model_type: bert``): building the neonlite encoder from a config and the names of
its tensors.

The encoder, as layers (names in brackets)::

    Embedding [word_embeddings] (pad_id = pad_token_id) -> PositionalEmbedding
    [position_embeddings] (learned, max_position_embeddings) -> SegmentEmbedding
    [token_type_embeddings] -> LayerNorm [embeddings_norm] -> num_hidden_layers x
    TransformerBlock [layer<i>] (post-norm, bidirectional, exact or tanh GELU)

then, for ``head="sentence-embedding"``, MeanPool [pool] -> L2Normalize [normalize]
(sentence-transformers' mean pooling + Normalize); for ``head="pooler"``, BERT's pooler:
FirstToken [cls] -> Affine + Tanh [pooler], ``transformers``' ``pooler_output`` (N,
hidden_size), read from and written to ``pooler.dense.*``; for ``head="lm"``, BERT's masked-LM head:
Affine + GELU [mlm_transform] -> LayerNorm [mlm_norm] -> TiedLinear [mlm_decoder] (through
``word_embeddings``' table) -> Bias [mlm_bias], logits (N, T, vocab); ``head="none"`` ends at
the last hidden state (N, T, hidden_size).
"""
import numpy as np

from ..initializers import Constant, Gaussian
from ..layers import (Affine, Bias, Embedding, FirstToken, L2Normalize, LayerNorm, MeanPool,
                      PositionalEmbedding, SegmentEmbedding, TiedLinear, TransformerBlock)
from ..transforms.activation import Gelu, Tanh
from .errors import InteropError
from .hf_config import ConfigReader, gelu_name
from .mapping import Link

HEADS = ("none", "sentence-embedding", "lm", "pooler")
#: the masked-LM head's layers after the blocks
LM_HEAD = [Affine, LayerNorm, TiedLinear, Bias]
#: the pooler head's layers after the blocks
POOLER_HEAD = [FirstToken, Affine]
PREFIXES = ("bert.",)


def ignored(name):
    """Tensors of a BERT checkpoint neonlite's encoder does not use: the position-id buffer,
    the pooler (the [CLS] projection, not part of the last hidden state or mean pooling;
    ``head="pooler"`` links it, and a linked tensor is never ignored) and pre-training heads
    (``cls.``)."""
    return name == "embeddings.position_ids" or name.startswith(("pooler.", "cls."))


def build_layers(config, head, where, dropout=0.0):
    """The neonlite layers of the BERT encoder that ``config`` describes."""
    read = ConfigReader(config, where)
    read.choice("position_embedding_type", "absolute", ["absolute"])
    read.require("is_decoder", False, False)
    read.require("add_cross_attention", False, False)
    vocab, d = read.count("vocab_size"), read.count("hidden_size")
    layers, heads = read.count("num_hidden_layers"), read.count("num_attention_heads")
    hidden = read.count("intermediate_size", 4 * d)
    eps = read.number("layer_norm_eps", 1e-12, positive=True)
    gelu = read.gelu("hidden_act", "gelu")
    pad = read.token_id("pad_token_id", 0, vocab)
    if d % heads:
        raise InteropError(f"{where}: hidden_size={d} is not a multiple of "
                           f"num_attention_heads={heads}")
    init = Gaussian(scale=read.number("initializer_range", 0.02))
    out = [Embedding(vocab, d, init=init, pad_id=pad, name="word_embeddings"),
           PositionalEmbedding(read.count("max_position_embeddings", 512), d, init=init,
                               name="position_embeddings"),
           SegmentEmbedding(read.count("type_vocab_size", 2), d, init=init,
                            name="token_type_embeddings"),
           LayerNorm(eps, name="embeddings_norm")]
    for i in range(layers):
        out.append(TransformerBlock(d, heads, causal=False, dropout=dropout, gelu=gelu,
                                    init=init, norm="post", eps=eps,
                                    fc1=Affine(hidden, init=init, bias=Constant(0.0)),
                                    fc2=Affine(d, init=init, bias=Constant(0.0)),
                                    name=f"layer{i}"))
    if head == "sentence-embedding":
        out += [MeanPool(name="pool"), L2Normalize(name="normalize")]
    elif head == "pooler":
        out += [FirstToken(name="cls"),
                Affine(d, init=init, bias=Constant(0.0), activation=Tanh(), name="pooler")]
    elif head == "lm":
        out += [Affine(d, init=init, activation=Gelu(gelu), name="mlm_transform"),
                LayerNorm(eps, name="mlm_norm"),
                TiedLinear("word_embeddings", name="mlm_decoder"), Bias(name="mlm_bias")]
    return out


def tied_tensors(tensors, where):
    """Drop the masked-LM decoder's copies of tied tensors (``cls.predictions.decoder.weight``
    = the word embeddings, ``.decoder.bias`` = ``cls.predictions.bias``), checking that they
    are copies: neonlite builds the decoder tied."""
    for copy, original in (("cls.predictions.decoder.weight", "embeddings.word_embeddings.weight"),
                           ("cls.predictions.decoder.bias", "cls.predictions.bias")):
        if copy in tensors:
            value = tensors.pop(copy)
            if original in tensors and not np.array_equal(value, tensors[original]):
                raise InteropError(f"{where}: tensor '{copy}' differs from '{original}'; "
                                   f"neonlite supports the masked-LM decoder tied to them only")
    return tensors


def links(model):
    """The :class:`Link` of every parameter of a BERT encoder ``model``."""
    top = model.layers.layers
    emb, pos, seg, norm = top[:4]
    out = [Link("embeddings.word_embeddings.weight", emb.W.name),
           Link("embeddings.position_embeddings.weight", pos.W.name),
           Link("embeddings.token_type_embeddings.weight", seg.W.name),
           Link("embeddings.LayerNorm.weight", norm.gamma.name),
           Link("embeddings.LayerNorm.bias", norm.beta.name)]
    for i, block in enumerate(b for b in top if isinstance(b, TransformerBlock)):
        hf, attn = f"encoder.layer.{i}", block.attn
        for part, w, b in (("attention.self.query", attn.Wq, attn.bq),
                           ("attention.self.key", attn.Wk, attn.bk),
                           ("attention.self.value", attn.Wv, attn.bv),
                           ("attention.output.dense", attn.Wo, attn.bo),
                           ("intermediate.dense", *_affine(block.fc1)),
                           ("output.dense", *_affine(block.fc2))):
            out += [Link(f"{hf}.{part}.weight", w.name, transpose=True),
                    Link(f"{hf}.{part}.bias", b.name)]
        for part, ln in (("attention.output.LayerNorm", block.ln1),
                         ("output.LayerNorm", block.ln2)):
            out += [Link(f"{hf}.{part}.weight", ln.gamma.name),
                    Link(f"{hf}.{part}.bias", ln.beta.name)]
    if [type(layer) for layer in top[-4:]] == LM_HEAD:
        transform, norm, _, bias = top[-4:]
        w, b = transform.layers[0].W, transform.layers[1].b
        out += [Link("cls.predictions.transform.dense.weight", w.name, transpose=True),
                Link("cls.predictions.transform.dense.bias", b.name),
                Link("cls.predictions.transform.LayerNorm.weight", norm.gamma.name),
                Link("cls.predictions.transform.LayerNorm.bias", norm.beta.name),
                Link("cls.predictions.bias", bias.b.name)]
    if _has_pooler(top):
        w, b = _affine(top[-1])
        out += [Link("pooler.dense.weight", w.name, transpose=True),
                Link("pooler.dense.bias", b.name)]
    return out


def _has_pooler(top):
    return [type(layer) for layer in top[-2:]] == POOLER_HEAD


def _affine(compound):
    linear, bias = compound.layers[:2]
    return linear.W, bias.b


def matches(top):
    """True when the model's top-level layers have the BERT encoder's form."""
    kinds = [type(layer) for layer in top]
    if kinds[-2:] in ([MeanPool, L2Normalize], POOLER_HEAD):
        kinds = kinds[:-2]
    elif kinds[-4:] == LM_HEAD:
        kinds = kinds[:-4]
    return kinds[:4] == [Embedding, PositionalEmbedding, SegmentEmbedding, LayerNorm] and \
        len(kinds) > 4 and all(k is TransformerBlock for k in kinds[4:])


def config_for(model, where):
    """The Hugging Face ``config.json`` (dict) of a BERT-form neonlite model."""
    top = model.layers.layers
    emb, pos, seg, norm = top[:4]
    blocks = [b for b in top if isinstance(b, TransformerBlock)]
    first = blocks[0]
    for block in blocks:
        _check_block(block, first, norm, where)
    if pos.sinusoidal:
        raise InteropError(f"{where}: BERT has learned positions; layer '{pos.name}' is "
                           f"sinusoidal")
    lm = [type(layer) for layer in top[-4:]] == LM_HEAD
    if _has_pooler(top):
        _check_pooler(top[-1], emb.d, where)
    if lm and (top[-2].tied_to != emb.name or top[-4].layers[-1].transform.approximate
               != first.gelu.transform.approximate or top[-3].eps != norm.eps):
        raise InteropError(f"{where}: the masked-LM head must be tied to '{emb.name}' and use "
                           f"the encoder's GELU and layer-norm eps")
    return {"architectures": ["BertForMaskedLM" if lm else "BertModel"], "model_type": "bert", "vocab_size": emb.vocab,
            "hidden_size": emb.d, "num_hidden_layers": len(blocks),
            "num_attention_heads": first.attn.heads,
            "intermediate_size": int(first.fc1.layers[0].W.value.shape[1]),
            "hidden_act": gelu_name(first.gelu.transform.approximate),
            "hidden_dropout_prob": first.attn.dropout,
            "attention_probs_dropout_prob": first.attn.dropout,
            "max_position_embeddings": pos.max_len, "type_vocab_size": seg.segments,
            "layer_norm_eps": norm.eps, "pad_token_id": emb.pad_id or 0,
            "position_embedding_type": "absolute", "initializer_range": 0.02}


def _check_pooler(affine, d, where):
    """BERT's pooler is dense (d -> d) with a bias, then tanh."""
    parts = affine.layers
    if len(parts) != 3 or not isinstance(parts[1], Bias) or \
            not isinstance(parts[2].transform, Tanh) or affine.nout != d:
        raise InteropError(f"{where}: layer '{affine.name}' cannot be exported as BERT's "
                           f"pooler: BERT's pooler is Affine(nout={d}) with a bias and Tanh")


def _check_block(block, first, norm, where):
    problems = [(block.norm != "post", "post-norm blocks (norm='post')"),
                (block.attn.causal, "bidirectional attention (causal=False)"),
                (not block.attn.bias or not norm.bias or len(block.fc1.layers) != 2
                 or len(block.fc2.layers) != 2, "biases in every projection and layer norm"),
                (block.ln1.eps != norm.eps or block.ln2.eps != norm.eps,
                 f"one layer-norm eps ({norm.eps})"),
                (block.attn.heads != first.attn.heads or block.attn.dk != block.attn.d_model
                 or block.attn.dv != block.attn.d_model, "equal heads, dk = dv = hidden size"),
                (block.gelu.transform.approximate != first.gelu.transform.approximate,
                 "one GELU form")]
    for bad, wanted in problems:
        if bad:
            raise InteropError(f"{where}: block '{block.name}' cannot be exported as BERT: "
                               f"BERT has {wanted}")
