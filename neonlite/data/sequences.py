"""SequenceIterator: bucketed minibatches of token-id sequences of different lengths, each
batch padded only to its own longest member.

A batch of length T' (T' <= ``max_len`` = T) is yielded as views (bsz, T') of device buffers
sized once for (bsz, T): the first bsz * T' elements of one flat buffer, so the view is
contiguous, and the view of each length is made once and kept (the same tensor object every
time that length comes again).
"""
import numpy as np

from ..backends import get_backend
from .iterator import DataError, check_batch_fits, shard_check
from .position import EpochBatches

#: what a sequence longer than ``max_len`` becomes
OVERFLOW = ("refuse", "cut")
#: how many global batches' worth of sequences are sorted by length together each epoch
DEFAULT_POOL = 64
#: the target of a pad position (PyTorch's and Hugging Face's default)
DEFAULT_IGNORE_INDEX = -100


class SequenceIterator(EpochBatches):
    """Iterate ``(x, t)`` minibatches of the token-id sequences ``sequences``, bucketed by
    length.

    Arguments:
        sequences: a list of 1-D integer arrays (token ids >= 0, any lengths), or an ``(ids,
            mask)`` pair as :meth:`neonlite.text.Tokenizer.encode_batch` returns it (ids (N, L),
            mask (N, L), 1 at real tokens; each row's real tokens, in order, are its sequence).
        max_len (int): T, the most input positions of a batch (the model's configured length).
        labels: None for a language model: the inputs are a sequence's tokens but its last,
            the targets (int32, (bsz, T')) the next tokens, ``ignore_index`` at pads.  Or (N,)
            integer class indices in [0, ``nclass``), one per sequence (targets (bsz,) int32).
        nclass (int): the number of classes of ``labels`` (required with them).
        pad_id (int): the input id of pad positions; it must not be a token of any sequence
            (a model with ``Embedding(pad_id=...)`` reads the padding mask from it).
        ignore_index (int): the target of pad positions (LM); negative, or at least the
            number of classes, and never a real target.
        overflow: ``"refuse"`` (a DataError naming the first sequence longer than ``max_len``,
            the default) or ``"cut"`` (keep its first ``max_len`` inputs; :attr:`ncut` says
            how many were cut).
        multiple_of (int): pad each batch's length up to a multiple of this (8 suits tensor
            cores), never past ``max_len``.
        shuffle (bool): draw each epoch's order from the backend's host RNG at the epoch's
            start: a permutation of the sequences, cut into pools of ``pool`` global batches,
            each pool sorted by length and cut into batches, the batches' order permuted
            (``group_by_length``).  False: every sequence sorted by length, batches in order
            (evaluation; no RNG drawn).
        pool (int): global batches per sorted pool.
        numbers: what the messages call each sequence (default its index): e.g. the
            passage numbers in a file of which these sequences are a part.

    The last batch of an epoch may have fewer than bsz sequences: its rows are filled by
    repeating its own sequences, and :attr:`valid` says how many rows are real.

    ``shard(rank, nranks)`` (data-parallel training): each global batch has ``nranks`` times
    the backend's batch of sequences, the same on every process (the order comes from the
    seed), and this process takes rows ``rank * bsz .. (rank + 1) * bsz - 1`` of it, padded to
    their own longest.  ``batches_from(skip)`` resumes an epoch part-way
    (:mod:`neonlite.data.position`).
    """

    def __init__(self, sequences, max_len, labels=None, nclass=None, pad_id=0,
                 ignore_index=DEFAULT_IGNORE_INDEX, overflow="refuse", multiple_of=1,
                 shuffle=True, pool=DEFAULT_POOL, name="sequences", numbers=None):
        self.be, self.name = get_backend(), name
        self.max_len = _positive(max_len, "max_len", name)
        self.multiple_of = _positive(multiple_of, "multiple_of", name)
        self.pool = _positive(pool, "pool", name)
        if overflow not in OVERFLOW:
            raise DataError(f"{name}: overflow must be one of {', '.join(OVERFLOW)}, got "
                            f"{overflow!r}")
        self.lm = labels is None
        self.seqs = _sequences(sequences, name)
        self.numbers = list(range(len(self.seqs))) if numbers is None else list(numbers)
        self.pad_id = _integer(pad_id, "pad_id", name)
        self.ignore_index = _integer(ignore_index, "ignore_index", name)
        self.nclass = None if self.lm else nclass
        self.labels = None if self.lm else _labels(labels, nclass, self.numbers, name)
        self._check_tokens()
        self.ncut = self._fit_lengths(overflow)
        self.lengths = np.array([len(s) - self.lm for s in self.seqs], dtype=np.int64)
        self.shuffle = shuffle
        self.shape = (self.max_len,)
        self.target_shape = (self.max_len,) if self.lm else ()
        self.ndata = len(self.seqs)
        self.rank, self.nranks = 0, 1
        self.valid = bsz = self.be.bsz
        check_batch_fits(name, bsz, [self.shape, self.shape], self.be)
        self._x_flat = self.be.zeros((bsz * self.max_len,), dtype=np.int32)
        self._t_flat = self.be.zeros((bsz * self.max_len,) if self.lm else (bsz,),
                                     dtype=np.int32)
        self._views = {}

    # ---- checks --------------------------------------------------------------------------
    def _check_tokens(self):
        every = np.concatenate(self.seqs)
        if (every < 0).any():
            at = _first(lambda s: (s < 0).any(), self.seqs)
            raise DataError(f"{self.name}: sequence {self.numbers[at]} holds a negative token id "
                            f"({int(self.seqs[at].min())}); token ids are >= 0")
        if (every == self.pad_id).any():
            at = _first(lambda s: (s == self.pad_id).any(), self.seqs)
            raise DataError(f"{self.name}: sequence {self.numbers[at]} holds the pad id "
                            f"{self.pad_id} as a "
                            f"real token; choose a pad_id no sequence uses")
        if self.lm:
            if 0 <= self.ignore_index <= int(every.max()):
                raise DataError(f"{self.name}: ignore_index={self.ignore_index} is a token id "
                                f"of the data (ids 0..{int(every.max())}); use a negative one "
                                f"such as {DEFAULT_IGNORE_INDEX}")
            short = [i for i, s in enumerate(self.seqs) if len(s) < 2]
            if short:
                raise DataError(f"{self.name}: sequence {self.numbers[short[0]]} has "
                                f"{len(self.seqs[short[0]])}"
                                f" token(s); a language model's sequence needs at least 2 (its "
                                f"inputs and their next tokens)")
        elif 0 <= self.ignore_index < self.nclass:
            raise DataError(f"{self.name}: ignore_index={self.ignore_index} is one of the "
                            f"{self.nclass} classes; use a negative one such as "
                            f"{DEFAULT_IGNORE_INDEX}")

    def _fit_lengths(self, overflow):
        """The sequences longer than ``max_len`` inputs cut (or a DataError); how many."""
        most = self.max_len + self.lm
        long = [i for i, s in enumerate(self.seqs) if len(s) > most]
        if long and overflow == "refuse":
            i = long[0]
            raise DataError(f"{self.name}: sequence {self.numbers[i]} has "
                            f"{len(self.seqs[i]) - self.lm} "
                            f"{'inputs' if self.lm else 'tokens'}, more than max_len="
                            f"{self.max_len} ({len(long)} sequences are longer); raise max_len "
                            f"or set overflow='cut'")
        for i in long:
            self.seqs[i] = self.seqs[i][:most]
        return len(long)

    @property
    def pad_target(self):
        """The target of pad positions (``ignore_index``) for a language model, whose cost
        must leave it out (:func:`neonlite.model_checks.check_pad_targets`); None for labels,
        which have no pad positions."""
        return self.ignore_index if self.lm else None

    # ---- iteration -----------------------------------------------------------------------
    def shard(self, rank, nranks):
        """Iterate only part ``rank`` of ``nranks`` of every global batch (see the class doc)."""
        self.rank, self.nranks = shard_check(self.name, rank, nranks)
        return self

    @property
    def nbatches(self):
        return -(-self.ndata // (self.be.bsz * self.nranks))

    def batches(self, shuffle, skip=0):
        """Generator of (x, t) views for one epoch, shuffled (``shuffle``: the order drawn
        from the host RNG) or sorted by length, from batch ``skip`` on."""
        for rows, valid in self.epoch_rows(shuffle)[skip:]:
            yield self._fill(rows, valid)

    def epoch_rows(self, shuffle=None):
        """``(rows, valid)`` of each batch of one epoch, in order (drawing the epoch's order
        from the host RNG when shuffling; ``shuffle`` None: as the iterator was made): this
        process's sequence indices and how many of them are real (a process whose part of
        the last global batch is empty repeats one sequence of it, none real)."""
        glob = self.be.bsz * self.nranks
        shuffle = self.shuffle if shuffle is None else shuffle
        if shuffle:
            order = self.be.rng.permutation(self.ndata)
            width = glob * self.pool
            order = np.concatenate([piece[np.argsort(self.lengths[piece], kind="stable")]
                                    for piece in np.split(order, range(width, self.ndata,
                                                                        width))])
        else:
            order = np.argsort(self.lengths, kind="stable")
        batches = [order[start:start + glob] for start in range(0, self.ndata, glob)]
        if shuffle:
            batches = [batches[i] for i in self.be.rng.permutation(len(batches))]
        lo, hi = self.rank * self.be.bsz, (self.rank + 1) * self.be.bsz
        return [(b[lo:hi], len(b[lo:hi])) if len(b) > lo else (b[:1], 0) for b in batches]

    def batch_length(self, rows):
        """T' of a batch of the sequences ``rows``: their longest, rounded up to
        ``multiple_of``, at most ``max_len``."""
        longest = int(self.lengths[rows].max())
        return min(self.max_len, -(-longest // self.multiple_of) * self.multiple_of)

    def _fill(self, rows, valid):
        bsz = self.be.bsz
        self.valid = valid
        rows = np.resize(rows, bsz)
        T = self.batch_length(rows)
        x, t = self._view(T)
        host_x = np.full((bsz, T), self.pad_id, dtype=np.int64)
        host_t = np.full((bsz, T), self.ignore_index, dtype=np.int32) if self.lm else \
            self.labels[rows]
        for n, i in enumerate(rows):
            seq = self.seqs[i]
            steps = len(seq) - self.lm
            host_x[n, :steps] = seq[:steps]
            if self.lm:
                host_t[n, :steps] = seq[1:]
        x.set(host_x)
        t.set(host_t)
        return x, t

    def _view(self, T):
        """The (x, t) views of length ``T``, made on the first batch of that length."""
        views = self._views.get(T)
        if views is None:
            bsz = self.be.bsz
            x = self._x_flat[:bsz * T].reshape((bsz, T))
            t = self._t_flat[:bsz * T].reshape((bsz, T)) if self.lm else self._t_flat
            views = self._views[T] = (x, t)
        return views

    def padding_fraction(self):
        """The fraction of the input positions of one epoch's batches (this process's part)
        that are pads, the repeated rows of a partial batch left out; the host RNG is left as
        it was."""
        state = self.be.rng.bit_generator.state
        try:
            batches = [rows[:valid] for rows, valid in self.epoch_rows() if valid]
        finally:
            self.be.rng.bit_generator.state = state
        real = sum(int(self.lengths[rows].sum()) for rows in batches)
        return 1.0 - real / sum(len(rows) * self.batch_length(rows) for rows in batches)


def _sequences(sequences, name):
    """The list of 1-D int64 arrays of ``sequences`` (a list, or an (ids, mask) pair)."""
    if isinstance(sequences, tuple) and len(sequences) == 2 and np.ndim(sequences[0]) == 2:
        ids, mask = (np.asarray(part) for part in sequences)
        if ids.shape != mask.shape:
            raise DataError(f"{name}: ids {ids.shape} and mask {mask.shape} differ in shape")
        if mask.dtype.kind not in "uifb" or ((mask != 0) & (mask != 1)).any():
            raise DataError(f"{name}: the mask must hold only 0 (pad) and 1 (real token)")
        sequences = [row[m.astype(bool)] for row, m in zip(ids, mask)]
    if isinstance(sequences, (str, bytes)) or not hasattr(sequences, "__len__"):
        raise DataError(f"{name}: expected a list of token-id sequences or an (ids, mask) "
                        f"pair, got {type(sequences).__name__}")
    if len(sequences) == 0:
        raise DataError(f"{name}: there are no sequences")
    out = []
    for i, seq in enumerate(sequences):
        arr = np.asarray(seq)
        if arr.ndim != 1 or arr.size == 0:
            raise DataError(f"{name}: sequence {i} must be a non-empty 1-D list of token ids, "
                            f"got shape {arr.shape}")
        if arr.dtype.kind not in "ui" and not (arr.dtype.kind == "f" and
                                               np.all(np.mod(arr, 1) == 0)):
            raise DataError(f"{name}: sequence {i} must hold integer token ids, got dtype "
                            f"{arr.dtype}")
        out.append(arr.astype(np.int64))
    return out


def _labels(labels, nclass, numbers, name):
    n = len(numbers)
    if not isinstance(nclass, (int, np.integer)) or isinstance(nclass, bool) or nclass < 2:
        raise DataError(f"{name}: labels need nclass, an int >= 2, got {nclass!r}")
    labels = np.asarray(labels)
    if labels.shape != (n,) or labels.dtype.kind not in "ui":
        raise DataError(f"{name}: labels must be {n} integer class indices (one per sequence), "
                        f"got shape {labels.shape} dtype {labels.dtype}")
    bad = np.flatnonzero((labels < 0) | (labels >= nclass))
    if bad.size:
        raise DataError(f"{name}: label {labels[bad[0]]} of sequence {numbers[bad[0]]} is "
                        f"out of range; expected 0 <= label < nclass={nclass}")
    return labels.astype(np.int32)


def _positive(value, what, name):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise DataError(f"{name}: {what} must be a positive int, got {value!r}")
    return int(value)


def _integer(value, what, name):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise DataError(f"{name}: {what} must be an int, got {value!r}")
    return int(value)


def _first(test, seqs):
    return next(i for i, s in enumerate(seqs) if test(s))
