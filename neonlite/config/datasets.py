"""The ``dataset`` entry of a run: ``dataset: shapes`` or ``dataset: {type: mnist, config:
{...}}``.

Each name maps to a data set class of :mod:`neonlite.data` whose constructor options are the
entry's ``config`` (checked like any other object's); ``path`` (the data directory) and
``shuffle`` are set by the run, not the YAML.  A made data set has ``shape`` (one example,
NHWC), ``nclass``, ``train_iter`` and ``valid_iter``; ``shape`` and ``nclass`` are known
before any file is read.

``augment`` (MNIST, CIFAR-10, Shapes) is the training set's augmentation, a list of
:mod:`neonlite.data.augment` ops (checked here with their key paths; the validation set takes
their deterministic form).

One more option works with every image data set: ``nclass``, the width of the one-hot
targets, at least the data set's own number of classes, so a 10-class network (the CIFAR-10
examples) can train on the 8-class Shapes set: ``dataset: {type: shapes, config: {nclass:
10}}``.
"""
import importlib
import inspect

from ..data.augment.from_config import pipeline_from_config
from ..data.iterator import DataError
from .build import check_type, constructor_options, type_word
from .errors import ConfigError, did_you_mean, short_repr

DATASETS = {
    "mnist": ("neonlite.data.mnist", "MNIST"),
    "cifar10": ("neonlite.data.cifar10", "CIFAR10"),
    "shapes": ("neonlite.data.shapes", "Shapes"),
    "text": ("neonlite.data.text", "TextCorpus"),
    "sequences": ("neonlite.data.text_sequences", "TextSequences"),
    "hdf5": ("neonlite.data.hdf5_iterator", "HDF5Dataset"),
    "image_folder": ("neonlite.data.image_folder", "ImageFolder"),
}
SET_BY_RUN = ("path", "shuffle")


def dataset_class(name, path="dataset"):
    """The class behind data set ``name`` (case-insensitive)."""
    if not isinstance(name, str) or name.lower() not in DATASETS:
        hint = did_you_mean(name, DATASETS) if isinstance(name, str) else \
            f"; expected one of {', '.join(DATASETS)}"
        raise ConfigError(f"{path}: unknown data set {short_repr(name)}{hint}")
    module, cls_name = DATASETS[name.lower()]
    try:
        return getattr(importlib.import_module(module), cls_name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{path}: data set {short_repr(name)} is not available in this install "
                          f"({err})") from None


def check_dataset(desc, path="dataset"):
    """The canonical ``{type, config}`` form of a ``dataset`` entry, every option checked."""
    if isinstance(desc, str):
        desc = {"type": desc}
    if not isinstance(desc, dict):
        raise ConfigError(f"{path}: expected a data set name ({', '.join(DATASETS)}) or "
                          f"{{type: name, config: {{...}}}}, got {type_word(desc)} "
                          f"({short_repr(desc)})")
    extra = [k for k in desc if k not in ("type", "config")]
    if extra:
        raise ConfigError(f"{path}.{extra[0]}: unknown key"
                          f"{did_you_mean(extra[0], ['type', 'config'])} (a data set is "
                          f"{{type: name, config: {{option: value}}}})")
    if "type" not in desc:
        raise ConfigError(f"{path}: missing 'type' (one of {', '.join(DATASETS)})")
    cls = dataset_class(desc["type"], f"{path}.type")
    config = desc.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}.config: expected a mapping of options, got "
                          f"{type_word(config)} ({short_repr(config)})")
    options = {k: v for k, v in constructor_options(cls).items() if k not in SET_BY_RUN}
    if hasattr(cls, "nclass"):
        options.setdefault("nclass", None)
    for key, value in config.items():
        if key not in options:
            raise ConfigError(f"{path}.config.{key}: unknown option of data set "
                              f"{short_repr(desc['type'])}{did_you_mean(key, options)}")
        check_type(value, options[key], f"{path}.config.{key}")
    if config.get("nclass") is not None and (not isinstance(config["nclass"], int) or
                                              isinstance(config["nclass"], bool) or
                                              config["nclass"] < 2):
        raise ConfigError(f"{path}.config.nclass: expected an integer >= 2, got "
                          f"{short_repr(config['nclass'])}")
    if config.get("augment") is not None:
        pipeline_from_config(config["augment"], f"{path}.config.augment")
    missing = [k for k, d in options.items() if d is inspect.Parameter.empty and k not in config]
    if missing:
        raise ConfigError(f"{path}.config: missing required option '{missing[0]}' of data set "
                          f"{short_repr(desc['type'])}")
    return {"type": desc["type"].lower(), "config": dict(config)}


def make_dataset(desc, data_dir=None, path="dataset"):
    """The data set of canonical entry ``desc`` reading from data root ``data_dir``."""
    desc = check_dataset(desc, path)
    cls = dataset_class(desc["type"], path)
    kwargs = dict(desc["config"])
    nclass = kwargs.pop("nclass", None) if "nclass" not in constructor_options(cls) else None
    if "path" in constructor_options(cls):
        kwargs["path"] = data_dir
    if kwargs.get("augment") is not None:
        kwargs["augment"] = pipeline_from_config(kwargs["augment"], f"{path}.config.augment")
    try:
        data = cls(**kwargs)
        data.shape
    except (ConfigError, DataError):
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{path}.config: {err}") from None
    if nclass is not None:
        if nclass < data.nclass:
            raise ConfigError(f"{path}.config.nclass: {nclass} is fewer than the "
                              f"{data.nclass} classes of data set {short_repr(desc['type'])}")
        data.nclass = nclass
    return data
