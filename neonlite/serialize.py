"""Checkpoints: one HDF5 file holding everything needed to rebuild a model and continue its
training exactly.

Layout (format version :data:`FORMAT_VERSION`)::

    /                 attrs: format="neonlite-checkpoint", format_version, neonlite_version
    /config           the run description as YAML text (layers, cost, optimizer, and for a
                      CLI run every top-level key); the network is rebuilt from it
    /params/<name>    every parameter and buffer (``Model.get_params()``), in model order
                      (attr ``names`` on /params keeps the order); attr ``crc32`` on each
                      dataset (and on each optimizer state) is the CRC-32 of its bytes
    /optimizer        attr ``state``: JSON of the optimizer's ``state_dict()`` (its step; one
                      per entry of a MultiOptimizer)
    /optimizer/states/<param name>/<key>   each Parameter.states tensor (velocity, m, v, ...)
    /progress         attrs epoch_index, step_index, in_shape, and batch_index (the batches of
                      epoch ``epoch_index`` already trained: > 0 for a checkpoint written when
                      a run was interrupted inside an epoch; absent means 0)
    /classes          (optional) the class names of a classifier's outputs, in output order
                      (an image folder's label map: ``model.classes``), UTF-8 strings
    /layer_states/<layer>.<state>   the state each stateful recurrent layer carries to its
                      next minibatch (``lstm0.h``, ``lstm0.c``: (batch, units)), attr
                      ``crc32``; absent in older files and for models without stateful layers
    /rng              attrs ``host`` (the backend's host RNG, JSON) and ``device`` (the
                      backend's device RNG where it has one, JSON); with batch_index > 0
                      also ``epoch_start`` (the host RNG when the epoch began: resuming
                      replays the epoch's data order from it and skips the batches done)

Only arrays, numbers and strings are read back: loading never runs code, and never reads
anything but the file itself (:func:`neonlite.safe_hdf5.open_hdf5`: a regular file, hard links
only, every dataset's data stored in the file; the datasets' declared sizes, which the writer
never compresses, must fit in the file's bytes before any is read).  A checkpoint is
written with :func:`neonlite.atomic.atomic_write` (a fresh temporary file beside it, fsync,
rename), so an interrupted save leaves the previous file (or none), never a broken one; one
holding NaN or inf values is never written.
"""
import json
from collections import OrderedDict
from pathlib import Path

import numpy as np

from .atomic import atomic_write
from .checkpoint_schema import (FORMAT_VERSION, MAX_CLASSES, READABLE_VERSIONS, SchemaError,
                                array_crc32, check_classes, check_version, validate)
from .version import __version__
from .config.yaml_io import dump_yaml, parse_yaml
from .finite import first_nonfinite
from .config.errors import ConfigError
from .safe_hdf5 import check_declared_fit, open_hdf5
from .optimizers.options import MAX_COUNT

FORMAT = "neonlite-checkpoint"


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint; the message names the file and the problem."""


class Checkpoint:
    """What :func:`read_checkpoint` found: ``config`` (dict), ``params`` (OrderedDict
    name -> ndarray), ``states`` ({param name: {key: ndarray}}), ``optimizer_state`` (dict or
    None), ``layer_states`` ({"<layer>.<state>": ndarray}, empty when the file has none),
    ``epoch_index``, ``step_index``, ``batch_index``, ``in_shape``
    (tuple), ``classes`` (tuple of class names, or None), ``rng`` ({"host": state, "device": state or None}), ``epoch_rng`` (host RNG
    state at the start of a partly trained epoch, or None)."""

    def __init__(self, path, **fields):
        self.path = path
        self.__dict__.update(fields)

    def first_nonfinite(self):
        """The name of the first parameter, buffer or optimizer state holding NaN or inf,
        else None."""
        states = ((f"{name}/{key}", value) for name, keys in self.states.items()
                  for key, value in keys.items())
        carried = ((f"/layer_states/{name}", value) for name, value in self.layer_states.items())
        return first_nonfinite(self.params.items()) or first_nonfinite(states) or \
            first_nonfinite(carried)


class NonFiniteWarning(UserWarning):
    """A checkpoint whose values are not all finite was loaded (a diverged training)."""


# ---- writing ---------------------------------------------------------------------------------
def save_checkpoint(path, model, optimizer=None, config=None):
    """Write ``model`` (initialized), ``optimizer`` state and the RNG state to ``path``.

    ``config`` is the run description to store (a dict, e.g. ``RunConfig.description()``);
    by default ``model.get_description()``.
    """
    import h5py


    model._require_initialized("save")
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    if config is None:
        config = model.get_description()
    text = dump_yaml(config)
    path = Path(path)
    params = model.get_params()
    _refuse_nonfinite(path, params, model)
    with atomic_write(path) as out, h5py.File(out, "w") as f:
        f.attrs["format"] = FORMAT
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["neonlite_version"] = __version__
        f.create_dataset("config", data=text, dtype=h5py.string_dtype())
        _write_params(f, params)
        _write_optimizer(f, model, optimizer)
        _write_layer_states(f, model)
        _write_classes(f, model)
        progress = f.create_group("progress")
        progress.attrs["epoch_index"] = int(model.epoch_index)
        progress.attrs["step_index"] = int(model.step_index)
        progress.attrs["in_shape"] = np.asarray(model.in_shape, dtype=np.int64)
        progress.attrs["batch_index"] = int(getattr(model, "batch_index", 0))
        rng = f.create_group("rng")
        rng.attrs["host"] = json.dumps(model.be.rng.bit_generator.state)
        if getattr(model, "batch_index", 0):
            rng.attrs["epoch_start"] = json.dumps(model.epoch_rng_state)
        if hasattr(model.be, "device_rng_state"):
            rng.attrs["device"] = json.dumps(model.be.device_rng_state())
    return path


def _refuse_nonfinite(path, params, model):
    """FloatingPointError when a parameter, buffer or optimizer state holds NaN or inf: such
    a checkpoint is never written, so it never replaces a good one."""
    bad = first_nonfinite(params.items()) or model.first_nonfinite()
    if bad is not None:
        raise FloatingPointError(f"{path}: not saved: {bad} holds NaN or inf values (the "
                                 f"training diverged); the previous file, if any, is kept")


def _write_params(f, params):
    group = f.create_group("params")
    group.attrs["names"] = json.dumps(list(params))
    for name, value in params.items():
        _write_array(group, name, value)


def _write_array(group, name, value):
    """A dataset of ``value`` with its CRC-32 in attr ``crc32``."""
    group.create_dataset(name, data=value).attrs["crc32"] = np.uint32(array_crc32(value))


def _write_optimizer(f, model, optimizer):
    group = f.create_group("optimizer")
    if optimizer is None:
        return
    group.attrs["state"] = json.dumps(_plain(_optimizer_state(optimizer)))
    states = group.create_group("states")
    for param in model.parameters():
        if param.states:
            sub = states.create_group(param.name)
            for key, tensor in param.states.items():
                _write_array(sub, key, tensor.get())


def carried_states(model):
    """``{"<layer>.<state>": tensor}`` of every stateful layer of ``model`` (in model order)."""
    return OrderedDict((f"{leaf.name}.{key}", tensor) for leaf in model.layers.leaves()
                       for key, tensor in getattr(leaf, "carried_states", dict)().items())


def _write_layer_states(f, model):
    states = carried_states(model)
    if states:
        group = f.create_group("layer_states")
        for name, tensor in states.items():
            _write_array(group, name, tensor.get())


def _write_classes(f, model):
    classes = getattr(model, "classes", None)
    if classes is None:
        return
    try:
        check_classes(list(classes))
    except SchemaError as err:
        raise ValueError(f"model.classes: {err}") from None
    import h5py
    f.create_dataset("classes", data=[c.encode("utf-8") for c in classes],
                     dtype=h5py.string_dtype("utf-8"))


def _optimizers(optimizer):
    """``{key: optimizer}``: the entries of a MultiOptimizer, else ``{"default": it}``."""
    mapping = getattr(optimizer, "mapping", None)
    return dict(mapping) if mapping is not None else {"default": optimizer}


def _optimizer_state(optimizer):
    return {key: opt.state_dict() for key, opt in _optimizers(optimizer).items()}


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---- reading ---------------------------------------------------------------------------------
def read_checkpoint(path):
    """A :class:`Checkpoint` read from ``path``; :class:`CheckpointError` (one line naming the
    file and the entry) for a missing, truncated, foreign or damaged file, an unsupported
    format version, or any value outside the format's schema
    (:mod:`neonlite.checkpoint_schema`), all checked before anything is built."""

    path = Path(path)
    f = open_hdf5(path, CheckpointError, "checkpoint file")
    try:
        with f:
            version = _check_format(path, f)
            check_declared_fit(f, path, CheckpointError, "checkpoint")
            raw = _read_raw(f)
    except CheckpointError:
        raise
    except SchemaError as err:
        raise CheckpointError(f"{path}: damaged checkpoint: {err}") from None
    except (KeyError, ValueError, TypeError, OSError, RuntimeError, AttributeError) as err:
        raise CheckpointError(f"{path}: damaged checkpoint: cannot read its contents "
                              f"({type(err).__name__}: {_cut(err)})") from None
    try:
        raw["config"] = parse_yaml(raw["config"], f"{path}:/config")
        return Checkpoint(path, **validate(raw, version))
    except ConfigError as err:
        raise CheckpointError(f"{path}: damaged checkpoint: {err}") from None
    except SchemaError as err:
        raise CheckpointError(f"{path}: damaged checkpoint: {err}") from None


def _cut(err, limit=200):
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_raw(f):
    """Everything in open checkpoint ``f`` as plain values and arrays, uninterpreted."""
    text = f["config"][()]
    text = text.decode("utf-8") if isinstance(text, bytes) else text
    if not isinstance(text, str):
        raise TypeError(f"/config holds {type(text).__name__}, not text")
    names = json.loads(f["params"].attrs["names"])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"/params names is not a list of names: {_cut(names, 60)}")
    params = OrderedDict((n, f["params"][n][()]) for n in names)
    crcs = {n: f["params"][n].attrs.get("crc32") for n in names}
    opt = f["optimizer"]
    optimizer_state = json.loads(opt.attrs["state"]) if "state" in opt.attrs else None
    states, state_crcs = {}, {}
    if "states" in opt:
        opt["states"].visititems(lambda name, obj: _collect_state(states, state_crcs, name, obj))
    carried = f["layer_states"] if "layer_states" in f else {}
    layer_states = OrderedDict((n, carried[n][()]) for n in carried)
    layer_state_crcs = {n: carried[n].attrs.get("crc32") for n in carried}
    progress = f["progress"].attrs
    rng = f["rng"].attrs
    classes = _read_classes(f["classes"]) if "classes" in f else None
    return dict(config=text, names=names, params=params, crcs=crcs,
                optimizer_state=optimizer_state, states=states, state_crcs=state_crcs,
                layer_states=layer_states, layer_state_crcs=layer_state_crcs,
                epoch_index=progress["epoch_index"], step_index=progress["step_index"],
                batch_index=progress.get("batch_index", 0), in_shape=progress["in_shape"],
                rng_host=json.loads(rng["host"]),
                rng_device=json.loads(rng["device"]) if "device" in rng else None,
                epoch_rng=json.loads(rng["epoch_start"]) if "epoch_start" in rng else None,
                classes=classes)


def _read_classes(dataset):
    """The stored class names as a list of str (checked by the schema); TypeError for a
    dataset that is not a 1-D array of strings, before its data is read."""
    import h5py
    if h5py.check_string_dtype(dataset.dtype) is None or dataset.ndim != 1:
        raise TypeError(f"/classes is not a list of strings (dtype {dataset.dtype}, shape "
                        f"{dataset.shape})")
    if dataset.shape[0] > MAX_CLASSES:
        raise TypeError(f"/classes holds {dataset.shape[0]:,} names, more than the "
                        f"{MAX_CLASSES:,} a checkpoint may hold")
    return [v.decode("utf-8") if isinstance(v, bytes) else v for v in dataset[()]]


def _collect_state(states, crcs, name, obj):
    import h5py
    if isinstance(obj, h5py.Dataset):
        if "/" not in name:
            raise KeyError(f"/optimizer/states/{name} is not under a parameter's group")
        param, key = name.rsplit("/", 1)
        states.setdefault(param, {})[key] = obj[()]
        crcs.setdefault(param, {})[key] = obj.attrs.get("crc32")


def _check_format(path, f):
    """The file's format version (one this neonlite reads); CheckpointError otherwise."""
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode(errors="replace")
    if not isinstance(fmt, str) or fmt != FORMAT:
        raise CheckpointError(f"{path}: not a neonlite checkpoint (an HDF5 file without the "
                              f"'{FORMAT}' format mark)")
    value = f.attrs.get("format_version", -1)
    try:
        return check_version(value)
    except SchemaError as err:
        version = value if isinstance(value, (int, np.integer)) else None
        if version is not None and version > max(READABLE_VERSIONS):
            raise CheckpointError(f"{path}: checkpoint format version {version} is newer than "
                                  f"this neonlite reads (up to {FORMAT_VERSION}); upgrade "
                                  f"neonlite") from None
        if version is not None and version < min(READABLE_VERSIONS):
            raise CheckpointError(f"{path}: checkpoint format version {version} is older than "
                                  f"this neonlite reads (versions "
                                  f"{', '.join(map(str, READABLE_VERSIONS))}); re-save it with "
                                  f"the neonlite release that wrote it, or retrain") from None
        raise CheckpointError(f"{path}: damaged checkpoint: {err}") from None


# ---- restoring -------------------------------------------------------------------------------
class ShapeStub:
    """Stands in for a data set where only the example shape is needed (``initialize``)."""

    def __init__(self, shape, name="checkpoint"):
        self.shape, self.name, self.target_shape = tuple(shape), name, None


def load_params(model, ckpt):
    """Set ``model``'s parameters and buffers from ``ckpt`` (names, shapes and the kind of
    dtype, float or integer, must match; float16/32/64 convert to the model's float type)."""
    for name, tensor in model.named_tensors().items():
        stored = ckpt.params.get(name)
        if stored is not None and np.dtype(tensor.dtype).kind == "f" and stored.dtype.kind != "f":
            raise CheckpointError(f"{ckpt.path}: damaged checkpoint: /params/{name}: dtype "
                                  f"{stored.dtype} is not a floating-point type (float16, "
                                  f"float32 or float64)")
    try:
        model.set_params(ckpt.params)
    except (KeyError, ValueError, TypeError) as err:
        message = err.args[0] if err.args else str(err)
        raise CheckpointError(f"{ckpt.path}: does not fit this network: {message}") from None


def check_same_optimizer(ckpt, optimizer_desc):
    """CheckpointError when ``ckpt`` was saved by a run whose optimizer (its type, or the
    type of any entry of a MultiOptimizer) differs from ``optimizer_desc``: resuming would
    give the new optimizer the old one's state and step count."""
    saved = _types(ckpt.config.get("optimizer"))
    wanted = _types(optimizer_desc)
    if saved and saved != wanted:
        raise CheckpointError(f"{ckpt.path}: was saved with optimizer {'/'.join(saved)} but this "
                              f"run uses {'/'.join(wanted)}; its state cannot be resumed "
                              f"(start from its weights with a fresh optimizer: --model-file)")


def _types(desc):
    """The optimizer class names in an optimizer description (a MultiOptimizer's entries
    too; schedules left out), in order."""
    if isinstance(desc, str):
        return [desc]
    if isinstance(desc, list):
        return [t for d in desc for t in _types(d)]
    if not isinstance(desc, dict):
        return []
    if "type" not in desc:
        return [t for d in desc.values() for t in _types(d)]
    found = [desc["type"]] if isinstance(desc.get("type"), str) else []
    config = desc.get("config") if isinstance(desc.get("config"), dict) else {}
    for key in ("optimizer_mapping", "optimizer"):
        found += _types(config.get(key))
    return found


def restore_training_state(model, optimizer, ckpt):
    """Continue where ``ckpt`` stopped: parameters, optimizer state and step, epoch and step
    counters, and the backend's RNG states (so shuffling and dropout go on identically).
    Call after every other set-up step that draws random numbers (model initialization).
    Counters with no room left to count on (:func:`check_resumable_counters`) are refused
    before anything is set."""
    check_resumable_counters(ckpt)
    load_params(model, ckpt)
    be = model.be
    by_name = {p.name: p for p in model.parameters()}
    unknown = [name for name in ckpt.states if name not in by_name]
    if unknown:
        raise CheckpointError(f"{ckpt.path}: optimizer state for unknown parameter "
                              f"'{unknown[0]}'")
    for name, keys in ckpt.states.items():
        param = by_name[name]
        param.states = {key: be.array(value, dtype=value.dtype) for key, value in keys.items()}
    if optimizer is not None and ckpt.optimizer_state is not None:
        entries = _optimizers(optimizer)
        if set(entries) != set(ckpt.optimizer_state):
            raise CheckpointError(f"{ckpt.path}: holds the state of optimizer entries "
                                  f"{sorted(ckpt.optimizer_state)} but this run's optimizer has "
                                  f"{sorted(entries)}")
        for key, opt in entries.items():
            opt.load_state_dict(ckpt.optimizer_state[key])
    _restore_layer_states(model, ckpt)
    model.epoch_index, model.step_index = ckpt.epoch_index, ckpt.step_index
    model.batch_index = ckpt.batch_index if ckpt.epoch_rng is not None else 0
    be.rng.bit_generator.state = ckpt.epoch_rng if model.batch_index else ckpt.rng["host"]
    if ckpt.rng["device"] is not None and hasattr(be, "set_device_rng_state"):
        be.set_device_rng_state(ckpt.rng["device"])


def check_resumable_counters(ckpt):
    """CheckpointError when a counter of ``ckpt`` (the optimizer's steps, the epoch, step or
    batch index) is beyond :data:`~neonlite.optimizers.options.MAX_COUNT` (2**62): a run
    going on from it could not save its counters back as int64."""
    counters = [(f"/progress {key}", getattr(ckpt, key))
                for key in ("epoch_index", "step_index", "batch_index")]
    counters += [(f"/optimizer state {entry}.{key}", value)
                 for entry, values in (ckpt.optimizer_state or {}).items()
                 for key, value in values.items() if key in ("step", "good_steps",
                                                             "skipped_steps")]
    for what, value in counters:
        if value > MAX_COUNT:
            raise CheckpointError(f"{ckpt.path}: {what}: {value} leaves no room to train on (a "
                                  f"run resumes from counters up to 2**62 = {MAX_COUNT}; the "
                                  f"file stores them as int64)")


def _restore_layer_states(model, ckpt):
    """The stateful layers' carried states from ``ckpt`` (a file without them, written before
    they were saved, leaves the initial states); CheckpointError when they do not fit."""
    if not ckpt.layer_states:
        return
    wanted = carried_states(model)
    for name, value in ckpt.layer_states.items():
        if name not in wanted:
            raise CheckpointError(f"{ckpt.path}: /layer_states/{name}: this network has no "
                                  f"stateful layer state of that name (it has "
                                  f"{sorted(wanted) or 'none'})")
        if value.shape != wanted[name].shape:
            raise CheckpointError(f"{ckpt.path}: /layer_states/{name}: the carried state has "
                                  f"shape {value.shape} (batch, units) but this run's is "
                                  f"{wanted[name].shape}; resume with the batch size the "
                                  f"checkpoint was trained with ({value.shape[0]})")
    missing = [name for name in wanted if name not in ckpt.layer_states]
    if missing:
        raise CheckpointError(f"{ckpt.path}: /layer_states: no carried state '{missing[0]}' "
                              f"for this network's stateful layer")
    for name, value in ckpt.layer_states.items():
        wanted[name].set(value.astype(wanted[name].dtype, copy=False))
