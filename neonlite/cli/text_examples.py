"""The options the character language-model twins in ``examples/`` add to ``neonlite
train``'s flags (``--data``, ``--steps``, ``--seq-len``, ``--dropout``, ``--prompt``,
``-n``), turning them into the run's settings, the sample they write after training, and
the ``train()`` loop and optimizer recipe the twins share.

Used through :func:`~neonlite.cli.example.example_main`'s ``add_arguments``, ``configure``
and ``finish`` hooks; ``--data FILE`` sets the data directory to the file's folder and the
text data set's ``filename`` to its name, so the run is what the YAML run with ``--data-dir``
and that ``filename`` would be.
"""
import copy
import math
import os
import sys

import numpy as np

from ..backends import gen_backend
from ..callbacks import Callbacks, LossLog
from ..data import TextCorpus
from ..layers import GeneralizedCost
from ..optimizers import AdamW, CosineSchedule
from ..optimizers.mixed_precision import MixedPrecision, for_datatype
from ..config.settings import DATATYPES
from ..data.text import builtin_text, read_text
from ..transforms import CrossEntropyMulti, NatsPerToken
from .arguments import positive_int


def text_lm_arguments(dropout=True, seq_len_help=None, seq_len=128):
    """``add_arguments`` hook: the options of a text twin (``dropout``: offer --dropout;
    ``seq_len``: the default window length)."""
    seq_len_help = seq_len_help or f"window length (default {seq_len})"
    def add(group):
        group.add_argument("--data", metavar="FILE", default=None,
                           help="a UTF-8 text file (default: Python's documentation text)")
        group.add_argument("--steps", type=positive_int, default=500, metavar="N",
                           help="training batches per epoch and the length of the learning "
                                "rate schedule (default 500)")
        group.add_argument("--seq-len", type=positive_int, default=seq_len, metavar="T",
                           help=seq_len_help)
        if dropout:
            group.add_argument("--dropout", type=float, default=0.0,
                               help="dropout rate in the blocks (default 0)")
        group.add_argument("--prompt", default="\n",
                           help="text the sample after training starts from (default: a "
                                "newline)")
        group.add_argument("-n", "--chars", type=int, default=300, metavar="N",
                           help="characters to sample after training (default 300; 0: none)")
    return add


def vocabulary_size(path):
    """Distinct characters of the text file ``path`` (None: Python's documentation text)."""
    return len(set(builtin_text() if path is None else read_text(path)))


def configure_text_lm(network, settings):
    """``configure`` hook: ``(network, settings)`` for the parsed options: the vocabulary of
    the text, the window length, the steps per epoch (and dropout, where offered)."""
    def configure(args):
        chosen = copy.deepcopy(settings)
        dataset = chosen["dataset"]["config"]
        dataset.update(seq_len=args.seq_len, nbatches=args.steps)
        if args.data is not None:
            args.data_dir = os.path.dirname(os.path.abspath(args.data))
            dataset["filename"] = os.path.basename(args.data)
        options = {"vocab_size": vocabulary_size(args.data), "seq_len": args.seq_len,
                   "steps": args.steps}
        if hasattr(args, "dropout"):
            options["dropout"] = args.dropout
        return (lambda: network(**options)), chosen
    return configure


def write_sample(model, args):
    """``finish`` hook: print the validation loss (when the run evaluated it) and ``-n``
    characters sampled after ``--prompt`` (temperature 0.8, the run's seed)."""
    last = getattr(model, "last_eval", None)
    if last is not None:
        print(f"validation loss {last[1]:.4f} nats/char ({last[1] / math.log(2):.3f} "
              f"bits/char)")
    if args.chars > 0:
        print(args.prompt + model.generate(args.prompt, args.chars, temperature=0.8,
                                           seed=args.rng_seed), flush=True)


def transformer_optimizer(steps, lr=1e-3):
    """The character transformers' AdamW: weight decay 0.1, ``min(50, steps - 1)`` warm-up
    steps, then cosine decay over ``steps`` to 10% of ``lr``."""
    return AdamW(lr, weight_decay=0.1,
                 schedule=CosineSchedule(steps, warmup_steps=min(50, steps - 1), min_ratio=0.1))


def train_text_lm(build, optimizer, data=None, steps=500, backend="cpu", batch_size=32, seed=0,
                  seq_len=128, log_every=50, stream=sys.stdout, datatype=None, streams=False,
                  callbacks=(), bf16_rounding=None):
    """Train a character language model for one epoch of ``steps`` batches of (batch_size,
    seq_len) characters of the text file ``data`` (None: Python's documentation text), the
    first 90% training and the last 10% validating; ``build(vocab_size)`` makes the
    :class:`~neonlite.Model`, ``streams`` reads the text in order per batch row (stateful
    models), ``callbacks`` are added after the loss log; ``datatype`` a name of ``-d`` ('bf16',
    'f32', ...) or a numpy type (None: float32); half precision trains as ``neonlite train``
    does, through :class:`~neonlite.optimizers.mixed_precision.MixedPrecision`
    (``bf16_rounding``: how it rounds bf16 copies, None: the recipe's default).  Returns
    (model, corpus, per-step training losses, validation loss in nats per character),
    stateful layers reset before the validation."""
    name = _datatype_name(datatype)
    options = {} if datatype is None else {"datatype": DATATYPES.get(name, datatype)}
    gen_backend(backend, batch_size=batch_size, rng_seed=seed, **options)
    optimizer = for_datatype(optimizer, name, bf16_rounding)
    corpus = TextCorpus(data, seq_len=seq_len, split=0.9, nbatches=steps, streams=streams)
    model = build(len(corpus.vocab))
    log = LossLog(log_every, stream)
    run_callbacks = Callbacks(model, progress=False)
    for callback in (log, *callbacks):
        run_callbacks.add(callback)
    cost = GeneralizedCost(CrossEntropyMulti())
    model.initialize(corpus, optimizer.wrap_cost(cost) if isinstance(optimizer, MixedPrecision)
                     else cost)
    model.layers.layers[0].set_vocabulary(corpus.vocab.chars)
    model.fit(corpus, optimizer, num_epochs=1, cost=model.cost, callbacks=run_callbacks)
    for leaf in model.layers.leaves():
        if getattr(leaf, "stateful", False):
            leaf.reset_state()
    valid = model.eval(corpus.valid_iter, NatsPerToken())
    return model, corpus, log.losses, valid


def _datatype_name(datatype):
    """The ``-d`` name of ``datatype`` ('bf16', 'f16', ...; 'bfloat16' is 'bf16'), or None
    for a type that has none."""
    if isinstance(datatype, str):
        return "bf16" if datatype.lower() == "bfloat16" else datatype
    names = {np.dtype(v): k for k, v in DATATYPES.items() if k != "bf16"}
    return None if datatype is None else names.get(np.dtype(datatype))
