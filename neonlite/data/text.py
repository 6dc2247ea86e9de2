"""Character-level text for language models: a vocabulary of characters, (N, T) windows of
token ids as inputs and the next characters, as int32 class indices (N, T), as targets."""
import os
from pathlib import Path

import numpy as np

from ..backends import get_backend
from ..host_memory import available_bytes
from ..safe_files import read_bounded
from .iterator import DataError, check_batch_fits, shard_check
from .locate import find_data_file, text_folders

#: the largest text file read whole (its token ids, int32, take four times as much)
MAX_TEXT_BYTES = 1 << 30
#: memory reading takes per byte of text, at most: the bytes, the str, the int32 token ids
BYTES_PER_TEXT_BYTE = 9


def builtin_text():
    """Python's own documentation text (``pydoc_data.topics``), topics in sorted order: a
    corpus every Python install has."""
    try:
        from pydoc_data.topics import topics
    except ImportError as err:
        raise DataError(f"no text path was given and this Python has no pydoc_data to fall "
                        f"back on ({err}); pass path=<a UTF-8 text file>") from None
    return "\n".join(topics[key] for key in sorted(topics))


def find_text_file(filename, data_dir=None):
    """The path of text file ``filename``: absolute, or looked for in the working folder,
    then :func:`text_folders` of data root ``data_dir`` (a DataError naming every place
    looked when it is in none)."""
    return find_data_file(filename, [Path.cwd()] + text_folders(data_dir), "text file")


def read_text(path, filename=None):
    """The UTF-8 text of file ``path``, or of ``filename`` found by :func:`find_text_file`
    under data root ``path``; errors name the file, every place looked and, for bad bytes,
    the offset.  Only a regular file of at most :data:`MAX_TEXT_BYTES` is read (``/dev/zero``,
    a FIFO: one line, before reading)."""
    if filename:
        path = find_text_file(filename, path)
    elif path is None or os.path.isdir(path):
        raise DataError(f"{path if path is not None else 'no text path'}: name the text file "
                        f"with filename=")
    available = available_bytes()
    limit = MAX_TEXT_BYTES if available is None else min(MAX_TEXT_BYTES,
                                                         available // BYTES_PER_TEXT_BYTE)
    raw = read_bounded(path, limit, DataError, "text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text: byte offset {err.start} holds "
                        f"{raw[err.start:err.start + 1]!r}") from None


class Vocabulary:
    """The characters of a text, token i being ``chars[i]``."""

    def __init__(self, chars):
        self.chars = "".join(chars)
        if len(set(self.chars)) != len(self.chars) or not self.chars:
            raise DataError(f"a vocabulary needs distinct characters, got {self.chars!r}")
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def of_text(cls, text):
        return cls(sorted(set(text)))

    def __len__(self):
        return len(self.chars)

    def encode(self, text, what="text"):
        """Token ids (int32) of ``text``; a character outside the vocabulary is a
        ``DataError`` naming it and its offset in ``what``."""
        lut = np.full(max(map(ord, self.chars)) + 1, -1, dtype=np.int32)
        lut[[ord(c) for c in self.chars]] = np.arange(len(self.chars), dtype=np.int32)
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = np.where(codes < len(lut), lut[np.minimum(codes, len(lut) - 1)], -1)
        if (ids < 0).any():
            at = int(np.argmax(ids < 0))
            raise DataError(f"{what}: character {text[at]!r} at offset {at} is not in the "
                            f"vocabulary of {len(self)} characters")
        return ids.astype(np.int32)

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


class TextWindows:
    """Minibatches of windows of one token sequence ``ids``: inputs x (N, T) token ids, int32
    (a backend's bfloat16 holds whole numbers exactly only up to 256, float16 up to 2048), and
    targets t (N, T) int32, the next tokens' ids (class indices: a one-hot (N, T, vocab) float
    array would be vocab times bigger).

    ``batches(shuffle=True)`` (what iterating gives when ``shuffle``) draws ``nbatches``
    batches of windows at random offsets from the backend's seeded RNG (training);
    ``batches(shuffle=False)`` walks the non-overlapping windows at offsets 0, T, 2T, ... in
    order (evaluation: ``ndata`` windows, the last batch filled up by wrapping around, with
    ``valid`` the number of its real rows).

    ``shard(rank, nranks)`` (data-parallel training) draws the offsets of the global batch,
    ``nranks`` times the backend's batch, the same on every process, and keeps this process's
    part, rows ``rank * bsz ...``; the default number of batches then counts global batches.

    ``streams=True`` (for stateful recurrent models, neon's layout): the text is cut into one
    stretch per batch row and batch b's row n is the window after batch b-1's row n, in both
    modes (the walk starts again at the beginning of each epoch; an epoch of ``nbatches``
    beyond the stretch length wraps around).
    """

    def __init__(self, ids, vocab, seq_len, shuffle=True, nbatches=None, name="text",
                 streams=False):
        self.be = get_backend()
        self.ids, self.vocab, self.name = np.asarray(ids, dtype=np.int32), vocab, name
        if not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
            raise DataError(f"{name}: seq_len must be a positive int, got {seq_len!r}")
        self.seq_len = T = int(seq_len)
        if len(self.ids) < T + 1:
            raise DataError(f"{name}: {len(self.ids)} characters are too few for one window of "
                            f"seq_len={T} inputs plus its next character")
        bsz = self.be.bsz
        self.shape, self.target_shape = (T,), (T,)
        self.nwindows = (len(self.ids) - 1) // T
        self.shuffle = shuffle
        if nbatches is not None and (not isinstance(nbatches, (int, np.integer)) or nbatches < 1):
            raise DataError(f"{name}: nbatches must be a positive int, got {nbatches!r}")
        self.random_nbatches = int(nbatches) if nbatches else max(1, self.nwindows // bsz)
        check_batch_fits(name, bsz, [(T,), (T,)], self.be)
        self.x_buf = self.be.zeros((bsz, T), dtype=np.int32)
        self.t_buf = self.be.zeros((bsz, T), dtype=np.int32)
        self._cols = np.arange(T + 1)
        self.valid = bsz
        self.rank, self.nranks = 0, 1
        self._given_nbatches = nbatches
        self.streams = bool(streams)
        if self.streams and (len(self.ids) - 1) // bsz < T:
            raise DataError(f"{name}: {len(self.ids)} characters are too few for {bsz} streams "
                            f"of at least one window of seq_len={T}")

    def shard(self, rank, nranks):
        """Iterate only part ``rank`` of ``nranks`` of every global batch (see the class doc)."""
        self.rank, self.nranks = shard_check(self.name, rank, nranks)
        if not self._given_nbatches:
            self.random_nbatches = max(1, self.nwindows // (self.be.bsz * nranks))
        return self

    @property
    def ndata(self):
        return self.nbatches * self.be.bsz if self.shuffle or self.streams else self.nwindows

    @property
    def nbatches(self):
        if self.streams and not self.shuffle:
            return (len(self.ids) - 1) // (self.be.bsz * self.nranks) // self.seq_len
        return self.random_nbatches if self.shuffle else -(-self.nwindows // self.be.bsz)

    def __len__(self):
        return self.nbatches

    def __iter__(self):
        return self.batches(self.shuffle)

    def batches(self, shuffle):
        """Generator of (x, t) device buffers for one epoch (see the class docstring)."""
        bsz, T = self.be.bsz, self.seq_len
        if self.streams:
            yield from self._stream_batches()
            return
        if shuffle:
            for _ in range(self.random_nbatches):
                starts = self.be.rng.integers(0, len(self.ids) - T, size=bsz * self.nranks)
                starts = starts[self.rank * bsz:(self.rank + 1) * bsz]
                self.valid = bsz
                self._fill(starts)
                yield self.x_buf, self.t_buf
            return
        for b in range(-(-self.nwindows // bsz)):
            window = np.arange(b * bsz, (b + 1) * bsz) % self.nwindows
            self.valid = min(bsz, self.nwindows - b * bsz)
            self._fill(window * T)
            yield self.x_buf, self.t_buf

    def _stream_batches(self):
        bsz, T = self.be.bsz, self.seq_len
        length = (len(self.ids) - 1) // (bsz * self.nranks)
        per_stream = length // T
        rows = (self.rank * bsz + np.arange(bsz)) * length
        self.valid = bsz
        for b in range(self.nbatches if self.shuffle else per_stream):
            self._fill(rows + (b % per_stream) * T)
            yield self.x_buf, self.t_buf

    def _fill(self, starts):
        chunk = self.ids[starts[:, None] + self._cols]
        self.x_buf.set(chunk[:, :-1])
        self.t_buf.set(chunk[:, 1:])


class TextCorpus(TextWindows):
    """A character-level corpus: the first ``split`` of the text trains (this object iterates
    it, ``nbatches`` random windows per epoch, default one pass worth of characters), the rest
    validates (:attr:`valid_iter`, consecutive windows in order).

    Arguments:
        path: a UTF-8 text file, or the data root to look for ``filename`` in; None (and no
            ``filename``) uses Python's own documentation text (``pydoc_data.topics``), so it
            runs offline.
        seq_len (int): T, the window length.
        split (float): the fraction of the characters, from the start, used for training.
        nbatches (int or None): training batches per epoch.
        vocab (str or None): the characters, token i being ``vocab[i]``; default the sorted
            distinct characters of the whole text (a character outside a given vocabulary is
            an error naming its offset).
        filename (str or None): the text file: absolute, or looked for in the working
            folder, then ``<root>/text/`` and ``<root>/`` (``root``: ``path``, else the default
            data root; see :func:`find_text_file`; a YAML run looks in the YAML's folder
            instead of the working folder).  A named file that is not found is a
            :class:`DataError` naming every place looked, never the built-in text.
        streams (bool): one stretch of text per batch row, walked in order (see
            :class:`TextWindows`), for stateful recurrent models.

    ``vocab`` (a :class:`Vocabulary`: ``chars``, ``encode``, ``decode``), ``train_iter``
    (this object) and ``valid_iter`` are neon's names.
    """

    #: the options that name files, and the folders (of the data root) they are looked for in
    file_options = {"filename": text_folders}

    def __init__(self, path=None, seq_len=128, split=0.9, nbatches=None, vocab=None,
                 filename=None, shuffle=True, name=None, streams=False):
        if filename:
            path = find_text_file(filename, path)
        where = path if path is not None else "pydoc_data.topics"
        self.source = path
        text = builtin_text() if path is None else read_text(path)
        if not 0.0 < split < 1.0:
            raise DataError(f"{where}: split must be in (0, 1), got {split!r}")
        if not text:
            raise DataError(f"{where}: the text file is empty")
        distinct = set(text) if vocab is None else set(vocab)
        if len(distinct) < 2:
            raise DataError(f"{where}: the text has {len(distinct)} distinct character "
                            f"({''.join(distinct)!r}); a language model needs at least 2")
        self.vocab = Vocabulary(vocab) if vocab is not None else Vocabulary.of_text(text)
        ids = self.vocab.encode(text, str(where))
        cut = int(len(ids) * split)
        name = name or os.path.basename(filename or str(where))  # the file, not its folder
        super().__init__(ids[:cut], self.vocab, seq_len, shuffle, nbatches, f"{name} train",
                         streams)
        self._valid = TextWindows(ids[cut:], self.vocab, seq_len, False, None, f"{name} valid",
                                  streams)

    @property
    def train_iter(self):
        return self

    @property
    def valid_iter(self):
        return self._valid

    def input_paths(self):
        """The text file (or data folder) read; none for the built-in text."""
        return [self.source] if self.source is not None else []
