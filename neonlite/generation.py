"""Sampling text from a character-level language model, with a key/value cache.

The model maps token ids (N, T) to next-token probabilities (N, T, vocab) (its last layer a
Softmax, whose input logits are what sampling uses) and starts with an ``Embedding``.  Its
context window is W = T, the model's sequence length.

With the cache (``use_cache=True``), each layer keeps its history in a decoding state (the
attention layers their keys and values), so a new character costs one position.  The context
is the characters since the window's start; when it would pass W, the window restarts at the
last W // 2 characters, which are re-read into a fresh cache (so on average a character costs
about two positions).  Without the cache the whole context is run through the model's
ordinary (training-path) fprop for every character.  Both follow the same window rule, so for
the same seed they sample the same characters.
"""
import numpy as np

from .data.iterator import DataError
from .data.text import Vocabulary
from .layers.activation import Activation
from .layers.embedding import Embedding
from .transforms.activation import Softmax


class GenerationError(DataError):
    """Bad input to :func:`generate` (the prompt, the sampling options, the vocabulary); a
    ``ValueError``, reported by the CLI in one line."""


def generate(model, vocab=None, prompt="\n", n=100, temperature=1.0, top_k=None, seed=None,
             use_cache=True):
    """``n`` characters sampled after ``prompt`` from ``model`` (returned without the prompt):
    the pieces of :func:`generate_stream` joined."""
    return "".join(generate_stream(model, vocab, prompt, n, temperature, top_k, seed, use_cache))


def generate_stream(model, vocab=None, prompt="\n", n=100, temperature=1.0, top_k=None,
                    seed=None, use_cache=True):
    """An iterator of the text sampled after ``prompt``, piece by piece as it is sampled (a
    character each, for a character vocabulary; for a subword tokenizer the text of each
    token once it decodes to whole characters), so ``neonlite generate -n 1000000000`` shows
    its text as it goes.  Every argument is checked now, before the first piece.

    Arguments:
        model: an initialized :class:`~neonlite.Model` (ids (T,) -> probabilities (T, vocab)).
        vocab: a :class:`~neonlite.data.Vocabulary`, something with a ``.vocab`` (a
            TextCorpus), a string of the characters, a subword
            :class:`~neonlite.text.Tokenizer` (a BPE GPT-2 model's; ``n`` then counts
            tokens), or None for the vocabulary recorded in the model's Embedding
            (``Embedding.set_vocabulary``, saved in checkpoints).
        prompt (str): at least one character, every one in the vocabulary.
        temperature (float >= 0): logits are divided by it before the softmax; 0 takes the
            most probable character every time (greedy decoding, the same for every seed).
        top_k (int or None): sample among the k most probable characters only.
        seed: seeds the sampling RNG (numpy ``default_rng``).
        use_cache (bool): decode incrementally with the key/value cache, or rerun the model
            on the whole context for each character.
    """
    vocab = _vocabulary(model, vocab)
    if not isinstance(prompt, str) or not prompt:
        raise GenerationError("generate: the prompt must be a non-empty string")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise GenerationError(f"generate: n must be an int >= 0, got {n!r}")
    if not temperature >= 0:
        raise GenerationError(f"generate: temperature must be >= 0 (0: greedy), got "
                              f"{temperature!r}")
    if top_k is not None and (not isinstance(top_k, (int, np.integer))
                              or not 1 <= top_k <= len(vocab)):
        raise GenerationError(f"generate: top_k must be an int in [1, {len(vocab)}], got "
                              f"{top_k!r}")
    try:
        tokens = [int(i) for i in vocab.encode(prompt, "the prompt")]
    except DataError as err:
        raise GenerationError(f"generate: {err}") from None
    if seed is not None and (not isinstance(seed, (int, np.integer)) or seed < 0):
        raise GenerationError(f"generate: seed must be an int >= 0 or None, got {seed!r}")
    runner = (_CachedRunner if use_cache else _FullRunner)(model)
    return _pieces(runner, vocab, tokens, n, temperature, top_k, np.random.default_rng(seed))


def _pieces(runner, vocab, tokens, n, temperature, top_k, rng):
    window, start = runner.window, 0
    text = _TextSoFar(vocab)
    for _ in range(n):
        if len(tokens) - start > window:
            start = len(tokens) - window // 2
        token = _sample(runner.next_logits(tokens, start), temperature, top_k, rng)
        tokens.append(token)
        piece = text.add(token)
        if piece:
            yield piece
    if text.rest():
        yield text.rest()


class _TextSoFar:
    """The new text of each sampled token.  A character vocabulary decodes each token
    alone; a subword tokenizer decodes the tokens since the last line break together (a
    token may hold half of a character, or take its spacing from its neighbours) and gives
    what is new once it ends in a whole character."""

    def __init__(self, vocab):
        self.vocab, self.line, self.shown = vocab, [], 0
        self.alone = isinstance(vocab, Vocabulary)

    def add(self, token):
        if self.alone:
            return self.vocab.decode([token])
        self.line.append(token)
        text = self.vocab.decode(self.line)
        if text.endswith("\ufffd"):
            return ""
        piece, self.shown = text[self.shown:], len(text)
        if text.endswith("\n"):
            self.line, self.shown = [], 0
        return piece

    def rest(self):
        return "" if self.alone or not self.line else self.vocab.decode(self.line)[self.shown:]


def _vocabulary(model, vocab):
    if model.in_shape is None:
        raise RuntimeError("generate: the model is not initialized (train or load it first)")
    embedding = model.layers.leaves()[0]
    if not isinstance(embedding, Embedding):
        raise GenerationError(f"generate: not a character language model: its first layer is "
                              f"{type(embedding).__name__} ({embedding.name}); generate needs "
                              f"one whose first layer is an Embedding (e.g. "
                              f"examples/char_transformer.yaml)")
    if vocab is None:
        chars = embedding.vocabulary()
        if chars is None:
            raise GenerationError(f"generate: the model records no vocabulary (layer "
                             f"'{embedding.name}'); pass vocab= or call "
                             f"Embedding.set_vocabulary when training")
        vocab = Vocabulary(chars)
    elif isinstance(vocab, str):
        vocab = Vocabulary(vocab)
    elif hasattr(vocab, "encode_batch"):
        return _SubwordVocabulary(vocab, embedding)
    elif not isinstance(vocab, Vocabulary):
        vocab = vocab.vocab
    if len(vocab) != embedding.vocab:
        raise GenerationError(f"generate: the vocabulary has {len(vocab)} characters but layer "
                         f"'{embedding.name}' embeds {embedding.vocab} tokens")
    return vocab


class _SubwordVocabulary:
    """A :class:`~neonlite.text.Tokenizer` with the ``encode(text, what)`` / ``decode`` /
    ``len`` that :func:`generate` uses; its ids must fit the model's embedding (a model may
    embed more ids than the tokenizer makes, never fewer)."""

    def __init__(self, tokenizer, embedding):
        if tokenizer.vocab_size > embedding.vocab:
            raise GenerationError(f"generate: the tokenizer makes {tokenizer.vocab_size} ids "
                                  f"but layer '{embedding.name}' embeds {embedding.vocab}")
        self.tokenizer, self.size = tokenizer, embedding.vocab

    def __len__(self):
        return self.size

    def encode(self, text, what):
        ids = self.tokenizer.encode(text)
        if not ids:
            raise DataError(f"{what} gives no tokens")
        return ids

    def decode(self, ids):
        return self.tokenizer.decode(ids)


def _sample(logits, temperature, top_k, rng):
    if temperature == 0:
        return int(np.argmax(logits))
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None and top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max())
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), z.size - 1))


def _softmax_head(model):
    last = model.layers.leaves()[-1]
    return isinstance(last, Activation) and isinstance(last.transform, Softmax)


class _FullRunner:
    """Runs the model's training-path fprop (inference mode) on the whole context, in row 0
    of a batch.  A model of sequences of any length up to W runs at the context's own
    length (a view of one input buffer sized for W, made once per length); another runs at
    W, positions past the context holding token 0, which, the model being causal, do not
    change the outputs read."""

    def __init__(self, model):
        self.model, self.be = model, model.be
        self.window = model.in_shape[0]
        self.any_length = getattr(model.layers, "max_steps", None) is not None
        self.flat = self.be.zeros((self.be.bsz * self.window,))
        self.inputs = {}
        self.softmax_head = _softmax_head(model)

    def input_of(self, length):
        """The (bsz, T) input view a context of ``length`` tokens runs in."""
        steps = length if self.any_length else self.window
        view = self.inputs.get(steps)
        if view is None:
            bsz = self.be.bsz
            view = self.inputs[steps] = self.flat[:bsz * steps].reshape((bsz, steps))
        return view

    def next_logits(self, tokens, start):
        context = tokens[start:]
        x = self.input_of(len(context))
        row = np.zeros(x.shape)
        row[0, :len(context)] = context
        x.set(row)
        y = self.model.fprop(x, inference=True)
        if self.softmax_head:
            y = self.model.layers.leaves()[-1].x
        return y.get()[0, len(context) - 1]


class _CachedRunner:
    """Incremental decoding (batch of one) through every layer's decoding state."""

    def __init__(self, model):
        self.model, self.be = model, model.be
        self.window = model.in_shape[0]
        self.state = model.layers.init_decode(1, self.window)
        self.softmax_head = _softmax_head(model)
        self.x = self.be.zeros((1, 1))
        self.start, self.done = None, 0

    def _last_state(self):
        state = self.state
        while state.children:
            state = state.children[-1]
        return state

    def _step(self, token):
        self.x.set(np.array([[token]]))
        y = self.model.layers.decode(self.x, self.state)
        return self._last_state().x if self.softmax_head else y

    def next_logits(self, tokens, start):
        if start != self.start:
            self.state.reset()
            self.start, self.done = start, start
        y = None
        for token in tokens[self.done:]:
            y = self._step(token)
        self.done = len(tokens)
        return y.get()[0, 0]
