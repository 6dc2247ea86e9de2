"""The plain settings of a training run's top level (``backend``, ``epochs``, ``batchsize``,
``rng_seed``, ``datatype``, ...): their types and defaults (:data:`KEYS`), the data type names
(:data:`DATATYPES`), and :func:`check_setting`.  The run's description as a whole is
``run.py``'s :class:`~neonlite.config.run.RunConfig`; checkpoints check their stored settings
here too."""
import numpy as np

from .build import type_word
from .errors import ConfigError, did_you_mean, short_repr
from ..backends import available_backends
from ..optimizers.mixed_precision import ROUNDINGS

DATATYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "bf16": "bfloat16"}

# key -> (expected python types, default; REQUIRED for none)
REQUIRED = object()
KEYS = {
    "backend": ((str,), "cpu"),
    "epochs": ((int,), 10),
    "batchsize": ((int,), 128),
    "rng_seed": ((int, type(None)), None),
    "datatype": ((str,), "f32"),
    "eval_freq": ((int,), 1),
    "metric": ((str, dict), "misclassification"),
    "dataset": ((str, dict), REQUIRED),
    "layers": ((list,), REQUIRED),
    "cost": ((str, dict), REQUIRED),
    "optimizer": ((str, dict), REQUIRED),
    "callbacks": ((list,), []),
    "save_path": ((str, type(None)), None),
    "serialize": ((int,), 0),
    "sync_bn": ((bool,), False),
    "scale_lr": ((str,), "none"),
    "lr_batchsize": ((int, type(None)), None),
    "bf16_rounding": ((str, type(None)), None),
}
SCALE_LR = ("none", "linear")
# key -> what it means, for the generated reference (docs/yaml_reference.md); every key has one
MEANINGS = {
    "backend": "the compute backend: cpu or gpu (the registered backends)",
    "epochs": "train until this many epochs are done (with `--resume`: the total)",
    "batchsize": "the minibatch size (under MPI the global batch, split over the ranks)",
    "rng_seed": "seeds initialization, shuffling and dropout; null: a fresh seed",
    "datatype": "storage type: f32, f16, f64 or bf16 (the cpu backend runs f32, f64 and bf16)",
    "eval_freq": "validate every N epochs and after the last; 0: never",
    "metric": "the validation metric: misclassification, accuracy, topk or logloss, or "
              "{type: Metric, config: {...}}",
    "dataset": "a data set name, or {type: name, config: {...}} (see Data sets)",
    "layers": "the network: a list of layers, {type: Layer, config: {...}}",
    "cost": "a cost name or {type: Cost, config: {...}}",
    "optimizer": "an optimizer name or {type: Optimizer, config: {...}}",
    "callbacks": "a list of callbacks, {type: Callback, config: {...}}",
    "save_path": "write a checkpoint here after training",
    "serialize": "with save_path, also write a checkpoint every N epochs; 0: only at the end",
    "sync_bn": "under MPI, batch norm statistics over all ranks instead of per rank",
    "scale_lr": "none, or linear: every learning rate times batchsize / lr_batchsize (the "
                "linear scaling rule, for a larger global batch, e.g. under mpirun)",
    "lr_batchsize": "the batch size the learning rates are set for; null: the YAML's "
                    "batchsize (before `-z`)",
    "bf16_rounding": "with -d bf16 on the cpu: how the float32 master weights are rounded "
                     "into the bf16 parameters, nearest or stochastic; null: the bf16 "
                     "recipe's default",
}
_POSITIVE = ("epochs", "batchsize", "lr_batchsize")
#: the largest batch: the kernels index a batch with 32-bit integers
MAX_BATCH = 2 ** 31 - 1
_NON_NEGATIVE = ("eval_freq", "serialize", "rng_seed")


def check_setting(key, value, types=None):
    """``value`` if it can stand for top-level key ``key``; a ConfigError naming the key
    otherwise."""
    return _check(key, value, types or KEYS[key][0])


def _check(key, value, types):
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        names = " or ".join(type_word(t()) if t is not type(None) else "null" for t in types)
        raise ConfigError(f"{key}: expected {names}, got {type_word(value)} ({short_repr(value)})")
    if key in _POSITIVE and value is not None and value < 1:
        raise ConfigError(f"{key}: expected a positive integer, got {value}")
    if key == "batchsize" and value > MAX_BATCH:
        raise ConfigError(f"batchsize: expected at most {MAX_BATCH} (the kernels index a "
                          f"batch with 32-bit integers), got {value}")
    if key in _NON_NEGATIVE and value is not None and value < 0:
        raise ConfigError(f"{key}: expected an integer >= 0, got {value}")
    if key == "scale_lr" and value not in SCALE_LR:
        raise ConfigError(f"scale_lr: expected one of {', '.join(SCALE_LR)}, got "
                          f"{short_repr(value)}{did_you_mean(value, SCALE_LR)}")
    if key == "bf16_rounding" and value is not None and value not in ROUNDINGS:
        raise ConfigError(f"bf16_rounding: expected one of {', '.join(ROUNDINGS)} (or null), "
                          f"got {short_repr(value)}{did_you_mean(value, ROUNDINGS)}")
    if key == "datatype" and value not in DATATYPES:
        raise ConfigError(f"datatype: unknown data type {short_repr(value)}"
                          f"{did_you_mean(value, DATATYPES)}")
    if key == "backend":
        if value not in available_backends():
            raise ConfigError(f"backend: unknown backend {short_repr(value)}"
                              f"{did_you_mean(value, available_backends())}")
    return value
