"""A tiny character transformer language model trained on a repeated sentence, for the tests
of text generation and of the attention layers' decoding.

:data:`TEXT` is the corpus (45 characters repeated 40 times); :func:`tiny_lm` builds the model
(embedding, positional embedding, ``blocks`` transformer blocks, final layer norm, softmax
head: token ids (N, T) in, (N, T, vocab) probabilities out); :func:`trained_tiny_lm` trains it
for ``steps`` batches of 4 windows of 16 characters on the CPU backend;
:func:`write_text_file` writes the corpus for them."""
import numpy as np

import neonlite
from neonlite import Model
from neonlite.data import TextCorpus
from neonlite.layers import (Affine, Embedding, GeneralizedCost, LayerNorm, PositionalEmbedding,
                             TransformerBlock)
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Softmax

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def write_text_file(folder):
    """The path (a str) of ``corpus.txt`` in ``folder``, written with :data:`TEXT`."""
    path = folder / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def tiny_lm(vocab, T=16, d=16, heads=2, blocks=2):
    """The untrained model for a vocabulary of ``vocab`` characters and contexts of ``T``."""
    layers = [Embedding(vocab, d, name="embed"), PositionalEmbedding(T, d, name="pos")]
    layers += [TransformerBlock(d, heads, mlp_ratio=2, name=f"block{i}") for i in range(blocks)]
    layers += [LayerNorm(name="ln_f"), Affine(vocab, activation=Softmax(), name="head")]
    return Model(layers)


def trained_tiny_lm(text_file, dtype=np.float64, steps=30):
    """(model, corpus): :func:`tiny_lm` trained with Adam(3e-3) for ``steps`` batches of the
    text in ``text_file``, its embedding carrying the corpus's vocabulary."""
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=dtype)
    corpus = TextCorpus(text_file, seq_len=16, nbatches=steps)
    model = tiny_lm(len(corpus.vocab))
    model.initialize(corpus, GeneralizedCost(CrossEntropyMulti()))
    model.layers.layers[0].set_vocabulary(corpus.vocab.chars)
    model.fit(corpus, Adam(3e-3), 1, model.cost)
    return model, corpus
