"""A model's descriptions and checkpoints, in and out: what :class:`neonlite.Model`'s
``from_description``, ``save``, ``from_checkpoint`` and ``load`` do (the methods delegate here,
so ``model.py`` holds the training loop).  The checkpoint format itself is
:mod:`neonlite.serialize`."""
import warnings

import numpy as np

from .backends import BackendUnavailable, gen_backend, get_backend
from .config.build import build
from .config.errors import ConfigError, short_repr
from .config.settings import DATATYPES
from .serialize import (CheckpointError, NonFiniteWarning, ShapeStub, load_params,
                        read_checkpoint, save_checkpoint)


def from_description(cls, desc):
    """A new, uninitialised ``cls`` from a description's ``layers`` list (a run's whole
    description, or just the list); :class:`ConfigError` with the key path of a bad entry."""
    layers = desc.get("layers") if isinstance(desc, dict) else desc
    if not isinstance(layers, list) or not layers:
        raise ConfigError("layers: expected a non-empty list of {type, config} layers, got "
                          f"{short_repr(layers)}")
    return cls([build(d, "layer", f"layers[{i}]") for i, d in enumerate(layers)])


def save(model, path, optimizer=None, config=None):
    """Write ``model``'s checkpoint to ``path`` (``config``: the run description to store;
    default the model's description, its backend's settings and its metric)."""
    if config is None:
        config = {**model.get_description(), **backend_settings(model)}
        if hasattr(model.metric, "get_description"):
            config["metric"] = model.metric.get_description()
    return save_checkpoint(path, model, optimizer, config)


def backend_settings(model):
    """``backend``, ``batchsize`` and ``datatype`` of the backend ``model`` runs on (what
    :func:`load` makes again when there is no backend yet)."""
    names = {np.dtype(v).name: k for k, v in DATATYPES.items() if k != "bf16"}
    settings = {"backend": model.be.name, "batchsize": int(model.be.bsz)}
    dtype = getattr(model.be, "dtype", None)
    if dtype is not None and (np.dtype(dtype).metadata or {}).get("bfloat16"):
        settings["datatype"] = "bf16"  # stored as uint16 bits, named by its dtype's metadata
    elif dtype is not None and np.dtype(dtype).name in names:
        settings["datatype"] = names[np.dtype(dtype).name]
    return settings


def from_checkpoint(cls, ckpt):
    """A ``cls`` rebuilt from read checkpoint ``ckpt``'s description, initialised for its
    input shape on the current backend, its parameters loaded (a warning where they hold NaN
    or inf)."""
    try:
        model = from_description(cls, ckpt.config)
        model.initialize(ShapeStub(ckpt.in_shape))
    except ConfigError as err:
        raise CheckpointError(f"{ckpt.path}: its network description does not build: "
                              f"{err}") from None
    load_params(model, ckpt)
    model.classes = ckpt.classes
    bad = ckpt.first_nonfinite()
    if bad is not None:
        warnings.warn(f"{ckpt.path}: {bad} holds NaN or inf values, so what this model "
                      f"computes is meaningless (the training that wrote it diverged)",
                      NonFiniteWarning, stacklevel=3)
    return model


def load(cls, path):
    """The ``cls`` stored in checkpoint ``path`` on the current backend (made from the
    checkpoint's settings when there is none yet), counters and metric as saved."""
    ckpt = read_checkpoint(path)
    _backend_for(ckpt)
    model = from_checkpoint(cls, ckpt)
    model.epoch_index, model.step_index = ckpt.epoch_index, ckpt.step_index
    if ckpt.config.get("metric") is not None:
        try:
            model.metric = build(ckpt.config["metric"], "metric", "metric")
        except ConfigError:
            model.metric = None
    return model


def _backend_for(ckpt):
    """Make the backend checkpoint ``ckpt`` was trained on when there is none yet."""
    try:
        get_backend()
        return
    except RuntimeError:
        pass
    name = ckpt.config.get("backend", "cpu")
    batch = ckpt.config.get("batchsize", 128)
    datatype = ckpt.config.get("datatype", "f32")
    try:
        gen_backend(name, batch_size=batch, datatype=DATATYPES.get(datatype, np.float32))
    except (BackendUnavailable, ValueError, TypeError) as err:
        raise RuntimeError(f"Model.load({str(ckpt.path)!r}): no backend yet, and the "
                           f"checkpoint's ({name}, batch {batch}, {datatype}) cannot run here "
                           f"({err}); call neonlite.gen_backend('cpu', batch_size={batch}) "
                           f"first") from None
