"""Incremental decoding: run a trained sequence model on one new position at a time.

``init_decode(layer, batch, max_len)`` makes a layer's :class:`DecodeState` (its buffers for
(B, 1, ...) inputs, made once); ``decode(layer, x, state)`` runs the layer on the new position
x (B, 1, ...) and returns its output (B, 1, ...), a tensor owned by the state.  Layers with
history (attention's key/value cache, the position of a positional embedding) define
``init_decode``/``decode`` methods and keep the history in their state; the position-wise core
layers (Linear, Bias, Activation, Dropout) and containers of them (Sequential, Affine) are
handled here.  Decoding is inference: dropout is the identity.
"""
from .activation import Activation, Dropout
from .containers import Sequential
from .layer import flat_rows
from .linear import Bias, Linear


class DecodeState:
    """Buffers and history of one layer while decoding: ``pos`` counts the positions seen,
    ``children`` holds the states of a container's layers.  ``reset()`` forgets the history
    (the buffers are kept)."""

    def __init__(self, be, batch, max_len, children=()):
        self.be, self.batch, self.max_len = be, batch, max_len
        self.children = list(children)
        self.pos = 0

    def reset(self):
        self.pos = 0
        for child in self.children:
            child.reset()


def init_decode(layer, batch, max_len):
    """The :class:`DecodeState` of ``layer`` for ``batch`` sequences of up to ``max_len``."""
    be = layer.be
    if hasattr(layer, "init_decode"):
        return layer.init_decode(batch, max_len)
    if isinstance(layer, Sequential):
        return DecodeState(be, batch, max_len,
                           [init_decode(child, batch, max_len) for child in layer.layers])
    if isinstance(layer, (Linear, Bias, Activation)):
        if len(layer.out_shape) != 2:
            raise TypeError(f"layer '{layer.name}' ({type(layer).__name__}): incremental "
                            f"decoding needs sequence outputs (T, D), it gives {layer.out_shape}")
        state = DecodeState(be, batch, max_len)
        state.out = be.zeros((batch, 1, layer.out_shape[-1]))
        return state
    if isinstance(layer, Dropout):
        return DecodeState(be, batch, max_len)
    raise TypeError(f"layer '{layer.name}' ({type(layer).__name__}) has no incremental decoding "
                    f"path; decoding supports Embedding, PositionalEmbedding, LayerNorm, "
                    f"MultiHeadAttention, TransformerBlock, Linear, Bias, Activation, Dropout "
                    f"and containers of them")


def decode(layer, x, state):
    """Run ``layer`` on the new position ``x`` (B, 1, ...); returns (B, 1, ...)."""
    if hasattr(layer, "decode"):
        return layer.decode(x, state)
    if isinstance(layer, Sequential):
        for child, child_state in zip(layer.layers, state.children):
            x = decode(child, x, child_state)
        return x
    if isinstance(layer, Linear):
        layer.be.compound_dot(flat_rows(x, layer.nin), layer.W.value,
                              flat_rows(state.out, layer.nout))
    elif isinstance(layer, Bias):
        state.out[:] = x + layer.b.value
    elif isinstance(layer, Activation):
        state.x = x
        layer.transform.fprop(layer.be, x, state.out)
    else:
        return x
    return state.out
