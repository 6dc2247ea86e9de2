"""Subword tokenizers from a Hugging Face ``tokenizer.json`` (WordPiece for BERT, byte-level
BPE for GPT-2), through the ``tokenizers`` library (the optional extra ``neonlite[hf]``)."""
import json
from pathlib import Path

import numpy as np

from ..interop.errors import InteropError, require

_PAD_NAMES = ("[PAD]", "<pad>", "<|pad|>")


class Tokenizer:
    """Text <-> token ids with the vocabulary and rules of a ``tokenizer.json``.

    ``encode(text)`` gives the ids of one text, special tokens included ([CLS] ... [SEP] for
    BERT), neither padded nor truncated unless ``max_length`` is given; ``encode_batch(texts,
    length)`` gives an (N, length) int64 array, each row truncated to ``length`` tokens
    (``tokenizers``' longest-first truncation: the special tokens are kept, the text is cut
    at its end) and padded at the end with :attr:`pad_id`, and the (N, length) mask (1 at real
    tokens).  The padding and truncation the file itself configures are not applied.
    """

    def __init__(self, backend, source="tokenizer"):
        self._tok = backend
        self.source = source
        self._tok.no_padding()
        self._tok.no_truncation()
        self.kind = _model_type(backend)
        self.pad_id = _pad_id(backend)

    @classmethod
    def from_file(cls, path):
        """The tokenizer stored in ``path`` (a ``tokenizer.json``)."""
        tokenizers = require("tokenizers")
        path = Path(path)
        if not path.is_file():
            raise InteropError(f"{path}: no such tokenizer file")
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # the library raises its own Exception type for bad files
            raise InteropError(f"{path}: not a readable tokenizer.json "
                               f"({' '.join(str(err).split())[:200]})") from None
        return cls(backend, str(path))

    @property
    def vocab_size(self):
        """The number of ids (added tokens included)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def __len__(self):
        return self.vocab_size

    def token_to_id(self, token):
        return self._tok.token_to_id(token)

    def encode(self, text, max_length=None):
        """The ids (list of int) of ``text``, truncated to ``max_length`` tokens when given."""
        _check_text(text, self.source)
        if max_length is None:
            return self._tok.encode(text).ids
        self._truncate(max_length)
        try:
            return self._tok.encode(text).ids
        finally:
            self._tok.no_truncation()

    def encode_batch(self, texts, length, pad_id=None):
        """(ids (N, length) int64, mask (N, length) int64) for the list ``texts``: each row
        truncated to ``length`` tokens and padded at the end with ``pad_id`` (default: the
        tokenizer's :attr:`pad_id`; a tokenizer without one, GPT-2's, needs it given)."""
        pad = self.pad_id if pad_id is None else pad_id
        if pad is None:
            raise InteropError(f"{self.source}: the tokenizer has no padding token; pass "
                               f"pad_id= to pad a batch")
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InteropError(f"{self.source}: encode_batch takes a list of strings")
        self._truncate(length)
        try:
            encodings = self._tok.encode_batch(list(texts))
        finally:
            self._tok.no_truncation()
        ids = np.full((len(texts), length), pad, dtype=np.int64)
        mask = np.zeros((len(texts), length), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, :len(enc.ids)] = enc.ids
            mask[row, :len(enc.ids)] = 1
        return ids, mask

    def _truncate(self, length):
        if not isinstance(length, (int, np.integer)) or length < 1:
            raise InteropError(f"{self.source}: the length must be a positive int, got "
                               f"{length!r}")
        self._tok.enable_truncation(int(length))

    def decode(self, ids, skip_special_tokens=True):
        """The text of ``ids`` (special tokens left out unless asked)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def __repr__(self):
        return f"Tokenizer({self.source!r}, {self.kind}, vocab_size={self.vocab_size})"


def _check_text(text, source):
    if not isinstance(text, str):
        raise InteropError(f"{source}: encode takes a string, got {type(text).__name__}")


def _model_type(backend):
    return json.loads(backend.to_str())["model"]["type"]


def _pad_id(backend):
    """The padding id the file configures, else that of a token named like a pad, else None."""
    padding = backend.padding
    if padding and padding.get("pad_id") is not None and padding.get("pad_token"):
        return int(padding["pad_id"])
    for name in _PAD_NAMES:
        found = backend.token_to_id(name)
        if found is not None:
            return int(found)
    return None
