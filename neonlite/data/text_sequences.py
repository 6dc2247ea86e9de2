"""TextSequences: a text file's blank-line-separated passages (a play's speeches) as
character sequences of many lengths, in bucketed batches (:class:`SequenceIterator`), for a
language model or for a whole-passage label (the passage's first line: its speaker)."""
import os
from collections import Counter

import numpy as np

from .dataset import SplitDataset
from .iterator import DataError
from .sequences import DEFAULT_IGNORE_INDEX, DEFAULT_POOL, SequenceIterator
from .text import Vocabulary, find_text_file, read_text
from .locate import text_folders

#: the character that pads, token 0 of every vocabulary of this data set
PAD_CHAR = "\0"
TASKS = ("lm", "label")


def passages(text):
    """The blank-line-separated passages of ``text``: lists of their lines, without the
    blank lines (a line of only spaces counts as blank), in order."""
    found, lines = [], []
    for line in text.splitlines():
        if line.strip():
            lines.append(line)
        elif lines:
            found.append(lines)
            lines = []
    if lines:
        found.append(lines)
    return found


class TextSequences(SplitDataset):
    """The passages of a UTF-8 text file (a speaker's line, then the speech until the next
    blank line, in Tiny Shakespeare) as character sequences.

    Arguments:
        path: the text file, or the data root to look for ``filename`` in.
        filename: the text file, looked for as :class:`~neonlite.data.TextCorpus` does.
        max_len (int): T, the most input characters of a batch; the model is configured for
            it and takes every batch at its own length T' <= T.
        task: ``"lm"``: each whole passage, next-character targets (``ignore_index`` at
            pads); ``"label"``: the passage's text after its first line, labelled by its
            first line (the speaker, without a final ``:``), among the ``top_labels`` most
            frequent first lines; passages of other speakers are left out (:attr:`nleft_out`).
        top_labels (int): the number of classes of ``task: label``.
        valid_every (int): passage i validates when i % valid_every == valid_every - 1, the
            others train (interleaved, so both sets see every part of the text).
        overflow: ``"refuse"`` or ``"cut"`` passages longer than ``max_len`` (see
            :class:`SequenceIterator`).
        multiple_of, ignore_index, pool: as :class:`SequenceIterator`'s.

    The vocabulary is the text's sorted distinct characters plus the pad character
    ``"\\0"`` (token 0, ``pad_id``; an ``Embedding(pad_id=0)`` reads the padding mask from
    it); ``vocab`` (a :class:`~neonlite.data.Vocabulary`), ``nclass`` (labels), ``shape``
    (T,), ``train_iter`` (shuffled by seed) and ``valid_iter`` (sorted by length, in order).
    """

    file_options = {"filename": text_folders}

    def __init__(self, path=None, filename=None, max_len=256, task="lm", top_labels=10,
                 valid_every=10, overflow="refuse", multiple_of=1,
                 ignore_index=DEFAULT_IGNORE_INDEX, pool=DEFAULT_POOL, shuffle=True, name=None):
        if filename:
            path = find_text_file(filename, path)
        self.source = path
        self.name = name or os.path.basename(str(path))
        if task not in TASKS:
            raise DataError(f"{self.name}: task must be one of {', '.join(TASKS)}, got "
                            f"{task!r}")
        for what, value in (("top_labels", top_labels), ("valid_every", valid_every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 2:
                raise DataError(f"{self.name}: {what} must be an int >= 2, got {value!r}")
        text = read_text(path)
        if PAD_CHAR in text:
            raise DataError(f"{path}: the text holds the pad character '\\0' (offset "
                            f"{text.index(PAD_CHAR)})")
        found = passages(text)
        if len(found) < valid_every:
            raise DataError(f"{path}: {len(found)} passages (blank-line-separated) are too few "
                            f"for a training and a validation set (valid_every={valid_every})")
        self.vocab = Vocabulary(sorted(set(text) | {PAD_CHAR, "\n"}))
        self.pad_id, self.task = 0, task
        texts, labels = self._examples(found, top_labels)
        self.ids = [self.vocab.encode(t, f"{path} passage {i}") for i, t in enumerate(texts)]
        self.passage_numbers = np.array(self.kept, dtype=np.int64)
        self.labels = labels
        self.nclass = len(self.label_names) if task == "label" else None
        self.shape = (max_len,)
        self.valid_every, self.shuffle = valid_every, shuffle
        self._options = dict(max_len=max_len, pad_id=0, ignore_index=ignore_index,
                             overflow=overflow, multiple_of=multiple_of, pool=pool)
        self._iters = {}
        for which in ("train", "valid"):
            self._iterator(which)  # every check now, before a model is built

    def _examples(self, found, top_labels):
        if self.task == "lm":
            self.label_names, self.nleft_out = [], 0
            self.kept = list(range(len(found)))
            return ["\n".join(lines) for lines in found], None
        speakers = [lines[0].rstrip().rstrip(":") for lines in found]
        counts = Counter(s for s, lines in zip(speakers, found) if len(lines) > 1)
        self.label_names = [s for s, _ in counts.most_common(top_labels)]
        if len(self.label_names) < 2:
            raise DataError(f"{self.source}: task label needs passages of at least 2 different "
                            f"first lines with text after them; found {len(self.label_names)}")
        index = {s: i for i, s in enumerate(self.label_names)}
        kept = [i for i, (s, lines) in enumerate(zip(speakers, found))
                if s in index and len(lines) > 1]
        self.nleft_out, self.kept = len(found) - len(kept), kept
        return (["\n".join(found[i][1:]) for i in kept],
                np.array([index[speakers[i]] for i in kept], dtype=np.int64))

    def split_rows(self, which):
        """The passage indices of ``which`` ("train" or "valid")."""
        every = np.arange(len(self.ids))
        valid = every % self.valid_every == self.valid_every - 1
        return every[valid if which == "valid" else ~valid]

    def _make_iterator(self, which):
        rows = self.split_rows(which)
        labels = None if self.labels is None else self.labels[rows]
        return SequenceIterator([self.ids[i] for i in rows], labels=labels, nclass=self.nclass,
                                shuffle=self.shuffle and which == "train",
                                name=f"{self.name} {which}", numbers=self.passage_numbers[rows],
                                **self._options)

    def input_paths(self):
        """The text file read."""
        return [self.source]
