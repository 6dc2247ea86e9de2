"""Token embeddings (N, T) ids -> (N, T, d) and positional embeddings added to (N, T, d)."""
import math

import numpy as np

from ..initializers import Gaussian
from .layer import ParameterLayer, is_count
from .decode import DecodeState


class Embedding(ParameterLayer):
    """y[n, t] = W[ids[n, t]] with the table W (vocab, d).

    Input: (N, T) token ids, whole numbers in [0, vocab): an integer tensor (what the text
    iterators give: int32) or one of the backend's float type (exact up to 2**24 in float32,
    2048 in float16, 256 in bfloat16).  An id outside that range (or not whole) is a ``ValueError`` naming this layer and
    the id's position (n, t).  Output (N, T, d).

    bprop scatter-adds the error into ``W.grad`` (deterministically, repeated ids summed in a
    fixed order) and returns None: token ids have no gradient, so an embedding is the first
    layer of a model.

    The buffer ``chars`` (vocab,) int32 holds the Unicode code point of each token when the
    vocabulary is text (see :meth:`set_vocabulary`; -1 where unset).  It is saved with the
    parameters, so a checkpoint carries what text generation needs to encode and decode.

    ``pad_id`` (an id in [0, vocab) or None): the padding token.  Each fprop then writes
    ``key_mask`` (N, T), 1 at real tokens and 0 at pads, which the model hands to every
    self-attention layer and mean pooling after this embedding
    (:func:`neonlite.layers.shared.share_padding_masks`): a pad never influences a real
    token.  Sequences are padded at the end (positions of real tokens are then those of the
    unpadded sequence).  ``given_mask`` (None, or a (N, T) tensor of 0/1 set by the model for
    inputs that come with their own mask, e.g. a tokenizer's ``(ids, mask)``) replaces the
    mask read from ``pad_id`` while it is set.

    Takes token ids (N, T') of any 1 <= T' <= T (T configured); the output and the mask are
    then views of that length (:meth:`~neonlite.layers.layer.Layer.set_steps`).
    """

    variable_steps = True
    stepped_buffers = ("outputs", "key_mask")

    def __init__(self, vocab, d, init=None, pad_id=None, name=None):
        super().__init__(name)
        for what, value in (("vocab", vocab), ("d", d)):
            if not is_count(value):
                raise ValueError(f"Embedding: {what} must be a positive int, got {value!r}")
        if pad_id is not None and not (is_count(pad_id, 0) and pad_id < vocab):
            raise ValueError(f"Embedding: pad_id must be an int in [0, {vocab}) or null, got "
                             f"{pad_id!r}")
        self.vocab, self.d = int(vocab), int(d)
        self.pad_id = None if pad_id is None else int(pad_id)
        self.key_mask = None
        self.given_mask = None
        self.init = init or Gaussian(scale=0.02)
        self.needs_deltas = False

    def _configure(self, in_shape):
        if len(in_shape) != 1:
            raise self.shape_error("token ids of shape (T,) per example")
        return (in_shape[0], self.d)

    def _max_steps(self):
        return self.in_shape[0]

    def set_needs_deltas(self, needed):
        self.needs_deltas = False

    def param_shapes(self):
        return [(self.vocab, self.d)]

    def allocate(self):
        super().allocate()
        self.W = self.add_param("W", (self.vocab, self.d), self.init, self.vocab, self.d)
        self.chars = self.be.empty((self.vocab,), dtype=np.int32)
        self.chars[:] = -1
        if self.pad_id is not None:
            self.key_mask = self.be.zeros((self.be.bsz, self.in_shape[0]))

    def buffers(self):
        return {"chars": self.chars}

    def set_vocabulary(self, chars):
        """Record the text vocabulary: ``chars`` a string (or list of one-character strings)
        with token i's character at position i, of length ``vocab``."""
        chars = list(chars)
        if len(chars) != self.vocab or any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError(f"layer '{self.name}' (Embedding): the vocabulary must be {self.vocab}"
                             f" single characters, got {len(chars)} items")
        self.chars.set(np.array([ord(c) for c in chars], dtype=np.int32))

    def vocabulary(self):
        """The recorded vocabulary as a string, or None when it was never set."""
        codes = self.chars.get()
        return None if (codes < 0).any() else "".join(chr(c) for c in codes)

    def _lookup(self, ids, out):
        try:
            self.be.take_rows(self.W.value, ids, out)
        except IndexError as err:
            raise ValueError(f"layer '{self.name}' (Embedding): token {err.args[0]} "
                             f"(vocab={self.vocab})") from None

    def fprop(self, x, inference=False):
        self.x = x
        self._lookup(x, self.outputs)
        if self.key_mask is not None and self.given_mask is not None:
            self.key_mask[:] = self.given_mask
        elif self.key_mask is not None:  # ids are whole numbers: 1 unless id == pad_id
            pad = float(self.pad_id)
            self.key_mask[:] = (x < pad - 0.5) + (x > pad + 0.5)
        return self.outputs

    def bprop(self, error):
        self.be.scatter_add_rows(self.W.grad, self.x, error)
        return None

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        state = DecodeState(self.be, batch, max_len)
        state.out = self.be.zeros((batch, 1, self.d))
        return state

    def decode(self, x, state):
        """ids (B, 1) -> (B, 1, d)."""
        self._lookup(x, state.out)
        return state.out


class PositionalEmbedding(ParameterLayer):
    """y[n, t] = x[n, t] + P[t] for a sequence x (N, T, d), with P (max_len, d) learned
    (parameter ``W``, shape (max_len, d)) or, with ``sinusoidal=True``, the fixed table
    P[t, 2i] = sin(t / 10000^(2i/d)), P[t, 2i+1] = cos(t / 10000^(2i/d)) (no parameters).

    A sequence longer than ``max_len`` is an error at configure time (and, while decoding,
    a position past ``max_len``).  Takes sequences (N, T', d) of any 1 <= T' <= T (T
    configured): positions 0..T'-1.
    """

    variable_steps = True

    def __init__(self, max_len, d=None, sinusoidal=False, init=None, name=None):
        super().__init__(name)
        if not is_count(max_len):
            raise ValueError(f"PositionalEmbedding: max_len must be a positive int, got "
                             f"{max_len!r}")
        self.max_len, self.d = int(max_len), d
        self.sinusoidal = bool(sinusoidal)
        self.init = init or Gaussian(scale=0.02)

    def _configure(self, in_shape):
        if len(in_shape) != 2 or (self.d is not None and in_shape[1] != self.d):
            raise self.shape_error(f"a sequence (T, {self.d or 'd'})")
        if in_shape[0] > self.max_len:
            raise self.shape_error(f"sequences of at most max_len={self.max_len} positions "
                                   f"(T <= {self.max_len})")
        return in_shape

    def param_shapes(self):
        return [] if self.sinusoidal else [(self.max_len, self.in_shape[1])]

    def allocate(self):
        self.outputs = self.be.zeros((self.be.bsz,) + self.out_shape)
        T, d = self.in_shape
        shape = (self.max_len, d)
        if self.sinusoidal:
            self.table = self.be.array(sinusoid_table(self.max_len, d))
        else:
            self.W = self.add_param("W", shape, self.init, self.max_len, d)
            self.table = self.W.value
            self.ones = self.be.ones((1, self.be.bsz))
            self._rows = {}

    def fprop(self, x, inference=False):
        self.outputs[:] = x + self.table[:self.steps]
        return self.outputs

    def bprop(self, error):
        """W.grad[:T'] += the sum of the error over the batch, one GEMM (ones (1, N) @ error
        (N, T'*d)) accumulating into the rows of the batch's positions."""
        if not self.sinusoidal:
            T, d = self.steps, self.in_shape[1]
            n = error.shape[0]
            self.be.compound_dot(self.ones, error.reshape(n, T * d),
                                 self._grad_rows(T).reshape(1, T * d), beta=1.0)
        return error

    def _grad_rows(self, T):
        """W.grad's first T rows (made once per length)."""
        rows = self._rows.get(T)
        if rows is None:
            rows = self._rows[T] = self.be.keep(self.W.grad[:T])
        return rows

    # ---- incremental decoding ------------------------------------------------------------------
    def init_decode(self, batch, max_len):
        state = DecodeState(self.be, batch, max_len)
        state.out = self.be.zeros((batch, 1, self.in_shape[1]))
        return state

    def decode(self, x, state):
        """x (B, 1, d) at position ``state.pos`` -> x + P[pos]; advances the position."""
        if state.pos >= self.max_len:
            raise ValueError(f"layer '{self.name}' (PositionalEmbedding): position {state.pos} "
                             f"is past max_len={self.max_len}")
        state.out[:] = x + self.table[state.pos:state.pos + 1]
        state.pos += 1
        return state.out


def sinusoid_table(max_len, d):
    """The (max_len, d) sinusoidal position table (float64, host)."""
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    freq = np.exp(-math.log(10000.0) * (np.arange(0, d, 2, dtype=np.float64) / d))
    table = np.zeros((max_len, d))
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq[: d // 2])
    return table
