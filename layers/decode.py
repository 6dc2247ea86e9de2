"""Incremental decoding: run a trained sequence model on one new position at a time.

Decoding is one protocol, two methods of every layer (``layers/layer.py``'s ``Layer``):
``layer.init_decode(batch, max_len)`` makes the layer's :class:`DecodeState` (its buffers for
(B, 1, ...) inputs, made once) and ``layer.decode(x, state)`` runs the layer on the new
position x (B, 1, ...) and returns its output (B, 1, ...), a tensor owned by the state.  A
layer without an incremental path keeps ``Layer``'s, which raise a ``TypeError`` naming it.
Layers with history (attention's key/value cache, the position of a positional embedding, a
recurrent layer's state) keep it in their state; position-wise layers (Linear, Bias,
Activation) make theirs with :func:`position_wise_state`; containers hold their children's
states in ``children``.  Decoding is inference: dropout is the identity.
"""


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


def position_wise_state(layer, batch, max_len):
    """The state of a position-wise layer of sequence outputs (T, D): an output buffer ``out``
    (batch, 1, D) and no history."""
    if len(layer.out_shape) != 2:
        raise TypeError(f"layer '{layer.name}' ({type(layer).__name__}): incremental "
                        f"decoding needs sequence outputs (T, D), it gives {layer.out_shape}")
    state = DecodeState(layer.be, batch, max_len)
    state.out = layer.be.zeros((batch, 1, layer.out_shape[-1]))
    return state
