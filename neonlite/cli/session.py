"""One training run from a :class:`RunConfig` and the command-line options: the code path of
``neonlite train`` and of every ``examples/<name>.py``.

Order: backend -> data -> model, cost, optimizer -> weights (``--model-file``) or the saved
state (``--resume``) -> callbacks -> ``Model.fit``.  Everything that can be wrong with the
configuration is checked before the first step, and nothing is written before then; the
outputs, with the inputs they must not replace, before the data is even loaded
(:mod:`.run_outputs`).

Under ``mpirun`` (see :mod:`neonlite.distributed`) every rank runs this same path: the
global batch (``-z``) is split across the ranks, each rank uses the device of its local
rank and its shard of the training data, gradients are averaged during bprop, and only rank
0 prints progress, writes the log and the checkpoints.  An error on any rank is printed
with the rank and ends the whole job.
"""
import shlex
import sys
import time
import warnings

import numpy as np

from ..backends import CPU_F16_SLOWDOWN, gen_backend, get_backend
from ..callbacks import Callbacks, ModelCheckpoint
from ..config.auto_sizes import check_fits_data
from ..config.data_files import resolve_data_files
from ..config.datasets import make_dataset
from ..config.errors import ConfigError
from ..config.yaml_io import dump_yaml
from ..distributed import DataParallel, detect_world, shard
from ..data.position import epoch_batches
from ..distributed.run_check import check_same_run, run_items
from ..interrupts import SIGNALS, StopOnSignal, TrainingInterrupted
from ..layers.layer import ShapeError
from ..memory_check import check_network_fits
from ..model_checks import check_pad_targets
from ..optimizers.mixed_precision import MixedPrecision, for_datatype
from ..serialize import (CheckpointError, check_same_optimizer, load_params, read_checkpoint,
                         restore_training_state)
from ..training_log import TrainingLog
from ..version import __version__
from .run_outputs import check_run_outputs
from ..config.settings import DATATYPES
from ..model_checks import check_optimizer


#: the data types ``neonlite train -b cpu`` runs: the C kernels' types, and bfloat16 storage
#: (float32 arithmetic or bf16 products, as ``neonlite doctor`` says; refused by the backend
#: where ``NEONLITE_BF16=off``)
CPU_DATATYPES = ("f32", "f64", "bf16")


class FirstBatches:
    """A data iterator cut to its first ``limit`` batches per epoch (``--max-batches``);
    everything else is the wrapped iterator's."""

    def __init__(self, data, limit):
        self.data, self.limit = data, limit

    def __len__(self):
        return min(len(self.data), self.limit)

    def __iter__(self):
        return self._cut(iter(self.data))

    def batches(self, shuffle):
        return self._cut(self.data.batches(shuffle))

    def batches_from(self, skip):
        """The wrapped iterator's epoch from batch ``skip``, still cut at ``limit``."""
        return self._cut((xt for _, xt in epoch_batches(self.data, skip)), skip)

    def _cut(self, batches, first=0):
        for i, batch in enumerate(batches, first):
            if i == self.limit:
                getattr(batches, "close", lambda: None)()
                return
            yield batch

    def __getattr__(self, name):
        return getattr(self.data, name)


def make_backend(settings, world=None):
    """``gen_backend`` from the run's settings (with ``world``: this rank's part of the
    batch, on the device of its local rank); a bad data type is a one-line error: float16 on
    the CPU (numpy's emulation), and bf16 where the backend refuses it (its reason:
    ``NEONLITE_BF16=off``); ``bf16_rounding: stochastic`` anywhere but -d bf16 on the
    cpu is one too."""
    if settings["backend"] == "cpu" and settings["datatype"] not in CPU_DATATYPES:
        raise ConfigError(f"datatype: the cpu backend runs f32, f64 and bf16 "
                          f"({settings['datatype']!r} asked for): its C kernels compute in "
                          f"float32 and float64, and numpy emulates float16 about "
                          f"{CPU_F16_SLOWDOWN} times slower than f32; use -d bf16 (16-bit "
                          f"storage) or -d f32, or -d {settings['datatype']} with -b gpu")
    if settings.get("bf16_rounding") == "stochastic" and \
            (settings["datatype"], settings["backend"]) != ("bf16", "cpu"):
        raise ConfigError(f"bf16_rounding: 'stochastic' rounds the bf16 weight copies of -d bf16 "
                          f"on the cpu backend; this run is -d {settings['datatype']} on "
                          f"{settings['backend']}: leave it out or use nearest")
    batch = settings["batchsize"] if world is None else world.split_batch(settings["batchsize"])
    try:
        return gen_backend(settings["backend"], batch_size=batch,
                           rng_seed=settings["rng_seed"],
                           datatype=DATATYPES[settings["datatype"]],
                           device_id=0 if world is None else world.local_rank)
    except (TypeError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"datatype: backend {settings['backend']!r} cannot run with "
                          f"datatype {settings['datatype']!r} ({err})") from None


def make_data(settings, data_dir, folder=None):
    """The data set ``settings["dataset"]`` describes.  The files it names are looked for in
    ``folder`` (the YAML's; None: the working folder) then the data root, and the entry is
    rewritten with the paths found (:func:`resolve_data_files`)."""
    settings["dataset"] = resolve_data_files(settings["dataset"], folder, data_dir)
    return make_dataset(settings["dataset"], data_dir)


def load_data(settings, data_dir, max_batches=None, train=True, valid=True, folder=None,
              data=None):
    """(data set, train iterator, validation iterator) on the current backend (None for
    the ones not asked for); ``data``: the data set, when :func:`make_data` already made it."""
    data = make_data(settings, data_dir, folder) if data is None else data
    sets = [data.train_iter if train else None, data.valid_iter if valid else None]
    sets = [get_backend().prefetched(s, max_batches) for s in sets]
    if max_batches:
        sets = [s if s is None else FirstBatches(s, max_batches) for s in sets]
    return (data, *sets)


def initialize(model, dataset, cost=None, optimizer=None):
    """``model.initialize`` with shape errors prefixed by the YAML key path of the layer."""
    try:
        model.initialize(dataset, cost, optimizer)
    except ShapeError as err:
        path = _failing_path(model.layers) or getattr(model.layers.layers[-1], "_config_path",
                                                      None)
        if path is None:
            raise
        raise ShapeError(f"{path}: {err}") from None


def check_optimizer_fits(model, optimizer):
    """The optimizer's check of the initialized model's parameters (every MultiOptimizer key
    names a layer), its error at the key path of the YAML entry."""
    try:
        check_optimizer(optimizer, model)
    except ConfigError as err:
        option = getattr(err, "option", None)
        if option is None:
            raise
        raise ConfigError(f"optimizer.config.{option}: {err}") from None


def check_memory_first(model, data, optimizer, iterators):
    """Before any data is read or buffer allocated: configure ``model``'s layers for
    ``data``'s example shape (known before its files are read) and refuse, in one line, a
    network and batch that cannot fit in memory (:mod:`neonlite.memory_check`), counting the
    ``iterators`` data iterators' batch buffers too.  A shape error is left to
    :func:`initialize`, which names the layer's YAML path."""
    try:
        model.layers.configure(tuple(data.shape))
    except (ShapeError, ValueError):
        return
    be = get_backend()
    batch = float(be.bsz) * float(np.prod(data.shape, dtype=np.float64)) * \
        np.dtype(be.dtype).itemsize
    check_network_fits(model.layers.leaves(), be, optimizer,
                       {f"the data set's batch buffers ({data.name})": iterators * 2 * batch})


def _failing_path(layer):
    """Key path of the innermost described layer whose configure did not finish."""
    children = list(getattr(layer, "layers", None) or []) + \
        list(getattr(layer, "branches", None) or [])
    for child in children:
        found = _failing_path(child)
        if found:
            return found
    failed = layer.in_shape is not None and layer.out_shape is None
    return getattr(layer, "_config_path", None) if failed else None


def train(run, opts, stream=None):
    """Train as ``run`` (a :class:`RunConfig`, flags already applied) and ``opts`` (data_dir,
    model_file, resume, output_file, max_batches, quiet) say.  Returns the trained model."""
    world = detect_world()
    if world.size == 1:
        return _train(run, opts, stream, world)
    with world.abort_on_error(getattr(opts, "verbose", False)):
        return _train(run, opts, stream, world)


def _train(run, opts, stream, world):
    settings = run.settings
    begin = time.perf_counter()
    seed = settings["rng_seed"]
    if world.size > 1:
        settings["rng_seed"] = world.bcast(seed if seed is not None else
                                           int(np.random.SeedSequence().entropy % 2 ** 31))
    make_backend(settings, world)
    data = make_data(settings, opts.data_dir, run.folder)
    extra_callbacks = run.build_callbacks()
    check_run_outputs(run, opts, data, extra_callbacks)
    run.size_layers(data)
    model, cost, optimizer = run.build_model(), run.build_cost(), run.build_optimizer()
    optimizer = for_datatype(optimizer, settings["datatype"], settings["bf16_rounding"])
    check_memory_first(model, data, optimizer, iterators=1 + (settings["eval_freq"] > 0))
    data, train_set, valid_set = load_data(settings, opts.data_dir, opts.max_batches,
                                           valid=settings["eval_freq"] > 0, data=data)
    check_same_run(world, run_items(
        run.description(), rng_seed=seed, data_shape=getattr(train_set, "shape", None),
        train_size=getattr(train_set, "ndata", None),
        valid_size=getattr(valid_set, "ndata", None),
        max_batches=opts.max_batches, resume=opts.resume, model_file=opts.model_file,
        version=__version__))
    train_set, valid_set = shard(train_set, world), shard(valid_set, world)
    model.metric = run.build_metric()
    if world.size > 1:
        DataParallel(world, sync_bn=settings["sync_bn"]).attach(model)
    quiet = opts.quiet or not world.is_root
    cost = optimizer.wrap_cost(cost) if isinstance(optimizer, MixedPrecision) else cost
    initialize(model, train_set, cost, optimizer)
    check_optimizer_fits(model, optimizer)
    check_fits_data(model, data)
    check_pad_targets(train_set, cost)
    _record_vocabulary(model, data)
    model.classes = getattr(data, "classes", None)
    if opts.model_file:
        load_params(model, read_checkpoint(opts.model_file))
    if opts.resume:
        ckpt = read_checkpoint(opts.resume)
        if ckpt.config.get("layers") != run.layers_desc:
            raise CheckpointError(f"{opts.resume}: was saved from a different network than "
                                  f"{run.source} (the layers differ), so it cannot be resumed")
        check_same_optimizer(ckpt, run.optimizer_desc)
        restore_training_state(model, optimizer, ckpt)
    description = run.description()
    callbacks = Callbacks(model, eval_set=valid_set,
                          eval_freq=settings["eval_freq"], metric=run.build_metric(),
                          progress=not quiet, quiet=quiet, run_config=description)
    for callback in extra_callbacks:
        if world.is_root or not isinstance(callback, ModelCheckpoint):
            callbacks.add(callback)
    if opts.output_file and world.is_root:
        callbacks.add(TrainingLog(opts.output_file, config=dump_yaml(description)))
    if settings["save_path"] and world.is_root:
        callbacks.add(ModelCheckpoint(settings["save_path"], every=settings["serialize"]))
    say = (lambda text: None) if quiet else (
        lambda text: print(text, file=stream or sys.stderr, flush=True))
    start = model.epoch_index
    say(f"{run.source}: {model.layers.param_count():,} parameters; {data.name} "
        f"{tuple(train_set.shape)}, {_count(train_set)} train / {_count(valid_set)} valid; "
        f"backend {settings['backend']}, batch {settings['batchsize']}"
        + (f" over {world.size} ranks, " if world.size > 1 else ", ") +
        f"{_datatype_note(settings)}, " + _lr_note(run) +
        (f"epochs {start + 1}..{settings['epochs']}" if start < settings["epochs"] else
         f"already {start} epochs done: nothing to train (raise -e)"))
    # under mpirun the ranks would stop at different steps: signals keep their usual effect
    with warnings.catch_warnings(), StopOnSignal(SIGNALS if world.size == 1 else ()) as stop:
        warnings.filterwarnings("ignore", "Model.fit: nothing to train")
        callbacks.stop_signal = stop
        try:
            model.fit(train_set, optimizer, settings["epochs"], cost, callbacks)
        except TrainingInterrupted as stopped:
            if stopped.checkpoint is not None:
                stopped.resume_command = resume_command(stopped.checkpoint, opts)
            raise
    last = getattr(model, "last_eval", None)
    result = f"; valid {last[0]} {last[1]:.4f}" if last else ""
    saved = f"; checkpoint {settings['save_path']}" if settings["save_path"] else ""
    done = model.epoch_index - start
    say(f"done: {done} epoch{'' if done == 1 else 's'} in {time.perf_counter() - begin:.1f} s"
        f"{result}{saved}")
    return model


def resume_command(checkpoint, opts):
    """The command line that continues a run interrupted into ``checkpoint``: the checkpoint
    holds the run (model, settings, data files, save path); the options it does not hold
    (``--data-dir``, ``-o``, ``--max-batches``) are repeated from ``opts``."""
    words = ["neonlite", "train", "--resume", str(checkpoint)]
    for flag, key in (("--data-dir", "data_dir"), ("-o", "output_file"),
                      ("--max-batches", "max_batches")):
        if getattr(opts, key, None) is not None:
            words += [flag, str(getattr(opts, key))]
    return shlex.join(words)


def _datatype_note(settings):
    """The run line's data type; for bf16 on the CPU, the arithmetic its products use here
    (the measured choice of ``neonlite doctor``'s bf16 row): ``bf16 (float32 products here:
    bf16 arithmetic is not faster on this CPU; neonlite doctor)``."""
    name = settings["datatype"]
    if name != "bf16" or settings["backend"] != "cpu":
        return name
    if get_backend().bf16_path("gemm") == "compute":
        return "bf16 (bf16 products here; neonlite doctor)"
    return "bf16 (float32 products here: bf16 arithmetic is not faster on this CPU; " \
           "neonlite doctor)"


def _lr_note(run):
    """``learning rates x4 (scale_lr linear: batch 128 / 32), `` when they are scaled."""
    scale, settings = run.lr_scale(), run.settings
    return "" if scale == 1.0 else (f"learning rates x{scale:g} (scale_lr linear: batch "
                                    f"{settings['batchsize']} / {settings['lr_batchsize']}), ")


def _count(data):
    n = getattr(data, "ndata", None) if data is not None else 0
    return f"{n:,}" if isinstance(n, int) else "?"


def _record_vocabulary(model, data):
    """Give text models (Embedding layers) the data set's characters, for ``generate``."""
    chars = getattr(getattr(data, "vocab", None), "chars", None)
    if chars is None:
        return
    for leaf in model.layers.leaves():
        if hasattr(leaf, "set_vocabulary") and getattr(leaf, "vocab", None) == len(chars):
            leaf.set_vocabulary(chars)
