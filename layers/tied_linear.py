"""The output projection that shares an Embedding's table (tied input and output embeddings)."""
from .decode import DecodeState
from .layer import Layer, flat_rows


class TiedLinear(Layer):
    """y = x @ E^T with E (vocab, d) the table ``W`` of the Embedding named ``tied_to``: a
    language model's head that reuses its input embedding (GPT-2, BERT's masked-LM decoder).

    Input (N, T, d) or (N, d); output (N, T, vocab) or (N, vocab).  The table stays one
    parameter, the Embedding's: this layer owns none, its bprop adds x^T-weighted errors
    (e^T x, (vocab, d)) into ``E.grad``, where the Embedding's bprop adds its own part, so the
    gradient sums both uses; checkpoints store the table once, under the Embedding's name.

    The model links the layer to its Embedding by name when it is built
    (:func:`neonlite.layers.shared.tie_layers`); the Embedding must come before this layer.
    """

    variable_steps = True  # a sequence (N, T', d) of any 1 <= T' <= T

    def __init__(self, tied_to, name=None):
        super().__init__(name)
        if not isinstance(tied_to, str) or not tied_to:
            raise ValueError(f"TiedLinear: tied_to must be the name of an Embedding layer, got "
                             f"{tied_to!r}")
        self.tied_to = tied_to
        self.embedding = None

    def _configure(self, in_shape):
        if self.embedding is None:
            raise ValueError(f"layer '{self.name}' (TiedLinear) is not linked to an Embedding: "
                             f"build it inside a Model, which links it to the Embedding named "
                             f"'{self.tied_to}'")
        d = self.embedding.d
        if len(in_shape) not in (1, 2) or in_shape[-1] != d:
            raise self.shape_error(f"features of width {d} (the width of Embedding "
                                   f"'{self.tied_to}'), as (T, {d}) or ({d},)")
        self.d, self.vocab = d, self.embedding.vocab
        return in_shape[:-1] + (self.vocab,)

    @property
    def table(self):
        """The shared :class:`~neonlite.layers.Parameter` E (vocab, d)."""
        return self.embedding.W

    def fprop(self, x, inference=False):
        self.x = x
        self.be.compound_dot(flat_rows(x, self.d), self.table.value,
                             flat_rows(self.outputs, self.vocab), transB=True)
        return self.outputs

    def bprop(self, error):
        e2 = flat_rows(error, self.vocab)
        self.be.compound_dot(e2, flat_rows(self.x, self.d), self.table.grad, beta=1.0,
                             transA=True)
        if self.needs_deltas:
            self.be.compound_dot(e2, self.table.value, flat_rows(self.deltas, self.d))
        return self.deltas

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        state = DecodeState(self.be, batch, max_len)
        state.out = self.be.zeros((batch, 1, self.vocab))
        return state

    def decode(self, x, state):
        """x (B, 1, d) -> logits (B, 1, vocab)."""
        self.be.compound_dot(flat_rows(x, self.d), self.table.value,
                             flat_rows(state.out, self.vocab), transB=True)
        return state.out
