"""The top level of a training run's YAML (neon's schema) and what it builds.

Keys (see :data:`KEYS`): ``backend``, ``epochs``, ``batchsize``, ``rng_seed``, ``datatype``,
``eval_freq``, ``metric``, ``dataset``, ``layers``, ``cost``, ``optimizer``, ``callbacks``,
``save_path``, ``serialize``, ``sync_bn`` (data-parallel runs: batch norm statistics over
the global batch).  Any other top-level key must define a YAML anchor for use
below (``wt_init: &wt_init {type: Gaussian, ...}``, ``nclass: &nclass 10``); another unknown
key, or one that looks like a misspelling of a known one, is an error.
"""
import copy
from pathlib import Path

from .auto_sizes import STAND_IN, auto_entries, data_size, fill_auto
from .build import build, type_word
from .datasets import check_dataset
from .errors import ConfigError, closest, did_you_mean
from .settings import DATATYPES, KEYS, REQUIRED, check_setting
from .yaml_io import anchored_keys, parse_yaml, read_text
from ..layers.cost import GeneralizedCost
from ..model import Model

METRICS = {"misclassification": ("Misclassification", {}), "accuracy": ("Accuracy", {}),
           "topk": ("TopKMisclassification", {"k": 5}), "logloss": ("LogLoss", {})}

class RunConfig:
    """A checked training-run configuration.

    ``settings`` holds the plain top-level values (defaults filled in); ``layers``, ``cost``,
    ``optimizer``, ``metric`` and ``callbacks`` are made fresh by the ``build_*`` methods.
    Every check happens in the constructor, so a bad file fails before anything runs.
    """

    def __init__(self, data, source="<config>", anchored=()):
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a mapping of keys (backend, epochs, layers, "
                              f"...) at the top level, got {type_word(data)}")
        self.source = source
        #: the folder relative data paths are looked for in first (the YAML file's; None:
        #: the working folder), see :mod:`neonlite.config.data_files`
        self.folder = None
        for key, value in data.items():
            if key not in KEYS:
                _check_extra_key(key, key in anchored)
        missing = [k for k, (_, d) in KEYS.items() if d is REQUIRED and k not in data]
        if missing:
            raise ConfigError(f"{missing[0]}: missing required key (a run needs "
                              f"{', '.join(k for k, (_, d) in KEYS.items() if d is REQUIRED)})")
        self.settings = {}
        for key, (types, default) in KEYS.items():
            value = data.get(key, default)
            self.settings[key] = check_setting(key, value, types)
        self.settings["dataset"] = check_dataset(self.settings["dataset"])
        self.settings["metric"] = _metric_desc(self.settings["metric"])
        if not self.settings["layers"]:
            raise ConfigError("layers: the list is empty; a model needs at least one layer")
        # build everything once now, so every error shows before anything runs, and keep the
        # canonical descriptions (shorthands expanded, anchors resolved) to build from later
        raw = {k: self.settings.pop(k) for k in ("layers", "cost", "optimizer", "callbacks")}
        #: the layers as given while some sizes are ``auto`` (see :meth:`size_layers`)
        self.auto_layers = copy.deepcopy(raw["layers"]) if auto_entries(raw["layers"]) else None
        if self.auto_layers is not None:
            raw["layers"] = fill_auto(raw["layers"], STAND_IN)
        self.layers_desc = [layer.get_description() for layer in _build_layers(raw["layers"])]
        self.build_model()  # checks the layer names (unique, printable) before anything runs
        self.cost_desc = _build_cost(raw["cost"]).get_description()
        self.optimizer_desc = build(raw["optimizer"], "optimizer", "optimizer").get_description()
        self.metric_desc = self.build_metric().get_description()
        self.callbacks_desc = [cb.get_description() for cb in _build_callbacks(raw["callbacks"])]

    @classmethod
    def from_file(cls, path):
        run = cls.from_text(read_text(path), str(path))
        run.folder = Path(path).expanduser().absolute().parent
        return run

    @classmethod
    def from_description(cls, desc, source="<checkpoint>"):
        """The run a checkpoint's ``config`` (a :meth:`description`) describes; a checkpoint
        saved without a run (``Model.save`` outside a run) is a one-line error."""
        missing = [k for k, (_, d) in KEYS.items() if d is REQUIRED
                   and k not in (desc if isinstance(desc, dict) else {})]
        if missing:
            raise ConfigError(f"{source}: holds no training run (no {', '.join(missing)}: it "
                              f"was saved outside neonlite train); give the run's FILE.yaml "
                              f"too")
        return cls(dict(desc), source)

    @classmethod
    def from_text(cls, text, source="<string>"):
        return cls(parse_yaml(text, source), source, anchored_keys(text))

    # ---- overrides and description -------------------------------------------------------------
    def override(self, **values):
        """Set plain top-level values (the CLI flags); None leaves a value as it is."""
        for key, value in values.items():
            if value is None:
                continue
            if key not in self.settings:
                raise ConfigError(f"{key}: not a top-level setting that can be overridden"
                                  f"{did_you_mean(key, self.settings)}")
            value = check_setting(key, value, KEYS[key][0])
            if key == "batchsize" and self.settings["lr_batchsize"] is None:
                self.settings["lr_batchsize"] = self.settings["batchsize"]
            if key == "dataset":
                value = check_dataset(value)
            self.settings[key] = _metric_desc(value) if key == "metric" else value
            if key == "metric":
                self.metric_desc = self.build_metric().get_description()
        return self

    def description(self):
        """The whole run as plain data in canonical form: every top-level key, objects as
        ``{type, config}`` (what checkpoints store and ``dump_yaml`` writes)."""
        desc = {}
        for key in KEYS:
            built = getattr(self, f"{key}_desc", None)
            desc[key] = built if built is not None else self.settings[key]
        return desc

    def size_layers(self, data):
        """Give the layers' ``auto`` sizes (:mod:`~neonlite.config.auto_sizes`) the size of
        data set ``data``; nothing to do when none is ``auto``."""
        if self.auto_layers is None:
            return
        size = data_size(data)
        self.layers_desc = [layer.get_description() for layer in
                            _build_layers(fill_auto(self.auto_layers, size))]
        self.auto_layers = None

    # ---- building ----------------------------------------------------------------------------
    def build_layers(self):
        """Fresh layer objects; each remembers its key path (``_config_path``) so a shape
        error can point at its YAML entry."""
        return _build_layers(self.layers_desc)

    def build_model(self):
        return Model(self.build_layers())

    def build_cost(self):
        return _build_cost(self.cost_desc)

    def build_optimizer(self):
        """The optimizer, its learning rates (each of a MultiOptimizer's) times
        :meth:`lr_scale`."""
        optimizer, scale = build(self.optimizer_desc, "optimizer", "optimizer"), self.lr_scale()
        if scale != 1.0:
            for opt in getattr(optimizer, "mapping", {}).values() or [optimizer]:
                opt.learning_rate *= scale
        return optimizer

    def lr_scale(self):
        """``batchsize / lr_batchsize`` with ``scale_lr: linear`` (the linear scaling rule:
        a k times larger batch takes k times larger steps, so an epoch of k times fewer
        steps moves about as far), else 1."""
        if self.settings["scale_lr"] != "linear":
            return 1.0
        return self.settings["batchsize"] / (self.settings["lr_batchsize"] or
                                             self.settings["batchsize"])

    def build_metric(self):
        return build(self.settings["metric"], "metric", "metric")

    def build_callbacks(self):
        return _build_callbacks(self.callbacks_desc)


def _check_extra_key(key, anchored):
    near = closest(key, KEYS)
    if near is not None:
        raise ConfigError(f"{key}: unknown key; did you mean '{near}'?")
    if not anchored:
        raise ConfigError(f"{key}: unknown top-level key; expected one of {', '.join(KEYS)} "
                          f"(any other key must define a YAML anchor: '{key}: &name value')")


def _metric_desc(value):
    if isinstance(value, str) and value.lower() in METRICS:
        name, config = METRICS[value.lower()]
        return {"type": name, "config": dict(config)}
    return value


def _build_layers(descs):
    layers = []
    for i, desc in enumerate(descs):
        layer = build(desc, "layer", f"layers[{i}]")
        _mark_paths(layer, f"layers[{i}]")
        layers.append(layer)
    return layers


def _build_cost(desc):
    cost = build(desc, "cost", "cost")
    return cost if isinstance(cost, GeneralizedCost) else GeneralizedCost(cost)


def _build_callbacks(descs):
    return [build(desc, "callback", f"callbacks[{i}]") for i, desc in enumerate(descs)]


def _mark_paths(layer, path):
    """Record ``path`` on ``layer`` and the key paths of the layers nested in its config."""
    layer._config_path = path
    for key in ("layers", "branches"):
        children = getattr(layer, "_given_args", {}) or {}
        value = children.get(key)
        if isinstance(value, list):
            _mark_list(value, f"{path}.config.{key}")


def _mark_list(items, path):
    for i, item in enumerate(items):
        if isinstance(item, list):
            _mark_list(item, f"{path}[{i}]")
        elif hasattr(item, "_given_args"):
            _mark_paths(item, f"{path}[{i}]")


__all__ = ["RunConfig", "KEYS", "DATATYPES", "METRICS"]
