"""The checkpoint format's schema: every value a checkpoint holds is checked here (types,
shapes, dtypes, ranges, checksums) before anything is built from it.

:func:`validate` takes what :func:`neonlite.serialize.read_checkpoint` read from the file
(plain values and arrays, nothing interpreted yet) and returns the fields of a
:class:`~neonlite.serialize.Checkpoint`, or raises ``CheckpointError`` with one line naming
the file, the entry and what was expected.

Schema (format version 2; version 1 is the same without the ``crc32`` attributes):

* ``format_version``: an integer (not a float, string or array);
* ``/config``: YAML text of a mapping with a non-empty ``layers`` list; its top-level
  ``backend``, ``batchsize``, ``rng_seed`` and ``datatype`` as a run's YAML allows them;
* ``/params``: attr ``names``, a JSON list of distinct strings, each a dataset of a real
  floating-point dtype (float16/32/64; an integer dtype for a buffer such as recorded
  characters) with attr ``crc32`` = CRC-32 of its C-order bytes; when loaded, each must
  have the kind (float or integer) of the model's tensor of that name;
* ``/optimizer`` attr ``state``: JSON ``{entry: {key: number}}``; ``step``, ``good_steps`` and
  ``skipped_steps`` integers in [0, 2**63 - 1] (every counter is an int64; resuming needs
  them at most 2**62), ``loss_scale`` a finite number > 0;
* ``/optimizer/states/<param>/<key>``: for a parameter in ``names``, of its shape, real
  floating-point or uint16 (bfloat16 bits), with ``crc32``;
* ``/progress``: ``epoch_index``, ``step_index`` and ``batch_index`` integers in
  [0, 2**63 - 1]; ``in_shape`` 1 to 4 positive integers whose product is at most
  :data:`MAX_EXAMPLE_VALUES`;
* ``/rng``: ``host`` a numpy bit generator state that the named generator accepts;
  ``device`` absent, such a state, or ``{generator: philox4x32_10, seed, counter}``;
* ``/classes`` (optional): the class names of the outputs, at most :data:`MAX_CLASSES`
  distinct non-empty strings of at most :data:`MAX_CLASS_NAME` characters, no control
  characters;
* ``/layer_states`` (optional; absent in files written before it existed): one dataset
  ``<layer name>.<state>`` per state a stateful recurrent layer carries to its next minibatch
  (``lstm0.h``, ``lstm0.c``), (batch, units), real floating-point, with ``crc32``; when
  resuming, the names and shapes must be the model's.
"""
import math
import zlib

import numpy as np
from .config.errors import ConfigError, short_repr
from .config.settings import check_setting

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_EXAMPLE_VALUES = 1 << 28
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")
_COUNTERS = ("step", "good_steps", "skipped_steps")
MAX_STORED_COUNT = 2 ** 63 - 1
MAX_CLASSES = 1 << 20
MAX_CLASS_NAME = 255


def array_crc32(ary):
    """CRC-32 (``zlib.crc32``) of ``ary``'s bytes in C order, as an unsigned int."""
    return zlib.crc32(memoryview(np.ascontiguousarray(ary)).cast("B")) & 0xFFFFFFFF


class SchemaError(ValueError):
    """One schema violation: the message names the entry and what was expected."""


def _integer(value, what, minimum=None):
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise SchemaError(f"{what}: expected an integer, got {_short(value)}")
    if minimum is not None and value < minimum:
        raise SchemaError(f"{what}: expected an integer >= {minimum}, got {int(value)}")
    return int(value)


def _count(value, what):
    """A counter (a step, epoch or batch index): an integer in [0, 2**63 - 1], what the file
    stores it as (an int64; a resumed run needs room to count on: see
    :func:`neonlite.serialize.restore_training_state`)."""
    count = _integer(value, what, 0)
    if count > MAX_STORED_COUNT:
        raise SchemaError(f"{what}: {count} is beyond the largest counter a checkpoint stores "
                          f"(2**63 - 1, an int64)")
    return count


def _short(value, limit=60):
    return short_repr(value, limit)


def check_version(value):
    """The format version as an int; SchemaError for anything but a readable integer."""
    version = _integer(value, "format_version")
    if version not in READABLE_VERSIONS:
        raise SchemaError(f"format_version: {version} is not one this neonlite reads "
                          f"({', '.join(map(str, READABLE_VERSIONS))})")
    return version


def check_array(ary, what, crc, version, kinds=("f",), extra=()):
    """SchemaError unless ``ary`` has a real float dtype (``kinds``) or one of ``extra`` and,
    from version 2 on, the CRC-32 ``crc``."""
    dtype = ary.dtype
    if not (dtype.kind in kinds and dtype.fields is None and dtype.itemsize in (2, 4, 8)) \
            and dtype not in [np.dtype(e) for e in extra]:
        raise SchemaError(f"{what}: dtype {dtype} is not a floating-point type "
                          f"(float16, float32 or float64)"
                          + (" or an integer type" if "i" in kinds else ""))
    if version >= 2:
        if crc is None:
            raise SchemaError(f"{what}: no crc32 checksum")
        if array_crc32(ary) != _integer(crc, f"{what} crc32"):
            raise SchemaError(f"{what}: checksum mismatch: its data was changed or damaged "
                              f"after it was written")


def check_config(config):
    """SchemaError unless the stored run description can be built from."""
    if not isinstance(config, dict):
        raise SchemaError(f"/config: expected a mapping (layers, cost, ...), got "
                          f"{_short(config)}")
    layers = config.get("layers")
    if not isinstance(layers, list) or not layers:
        raise SchemaError(f"/config: layers: expected a non-empty list, got {_short(layers)}")
    for key in ("backend", "batchsize", "rng_seed", "datatype"):
        if key in config:
            try:
                check_setting(key, config[key])
            except ConfigError as err:
                raise SchemaError(f"/config: {err}") from None


def check_params(names, params, crcs, version):
    """Parameters are floating-point; buffers (e.g. an Embedding's recorded characters) may
    be integers: which is which is checked against the model when they are loaded."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) \
            or len(set(names)) != len(names):
        raise SchemaError(f"/params names: expected a list of distinct parameter names, got "
                          f"{_short(names)}")
    for name in names:
        check_array(params[name], f"/params/{name}", crcs[name], version, kinds="fiu")


def check_optimizer_state(state):
    if state is None:
        return
    if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
        raise SchemaError(f"/optimizer state: expected {{entry: {{step: n, ...}}}}, got "
                          f"{_short(state)}")
    for entry, values in state.items():
        for key, value in values.items():
            what = f"/optimizer state {entry}.{key}"
            if key in _COUNTERS:
                _count(value, what)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or (key == "loss_scale" and value <= 0):
                raise SchemaError(f"{what}: expected a finite number"
                                  f"{' > 0' if key == 'loss_scale' else ''}, got {_short(value)}")


def check_states(states, crcs, params, version):
    for name, keys in states.items():
        if name not in params:
            raise SchemaError(f"/optimizer/states/{name}: no such parameter in /params")
        for key, value in keys.items():
            what = f"/optimizer/states/{name}/{key}"
            check_array(value, what, crcs[name][key], version, extra=(np.uint16,))
            if value.shape != params[name].shape:
                raise SchemaError(f"{what}: shape {value.shape} differs from its parameter's "
                                  f"{params[name].shape}")


def check_layer_states(states, crcs, version):
    """The carried states of stateful layers: ``{"<layer>.<state>": (batch, units)}``."""
    for name, value in states.items():
        what = f"/layer_states/{name}"
        if "." not in name:
            raise SchemaError(f"{what}: expected a name '<layer>.<state>'")
        check_array(value, what, crcs[name], version)
        if value.ndim != 2 or 0 in value.shape:
            raise SchemaError(f"{what}: expected a (batch, units) array, got shape "
                              f"{value.shape}")


def check_classes(classes):
    """SchemaError unless ``classes`` (None, or a list) is a bounded list of distinct
    printable names."""
    if classes is None:
        return None
    if not isinstance(classes, list) or not 1 <= len(classes) <= MAX_CLASSES:
        raise SchemaError(f"/classes: expected 1 to {MAX_CLASSES:,} class names, got "
                          f"{_short(classes)}")
    for i, name in enumerate(classes):
        if not isinstance(name, str) or not 0 < len(name) <= MAX_CLASS_NAME or \
                not name.isprintable():
            raise SchemaError(f"/classes[{i}]: expected a printable name of 1 to "
                              f"{MAX_CLASS_NAME} characters, got {_short(name)}")
    if len(set(classes)) != len(classes):
        raise SchemaError(f"/classes: the class names are not distinct ({_short(classes)})")
    return tuple(classes)


def check_progress(epoch_index, step_index, in_shape):
    epoch = _count(epoch_index, "/progress epoch_index")
    step = _count(step_index, "/progress step_index")
    shape = np.asarray(in_shape)
    if shape.ndim != 1 or not 1 <= shape.size <= 4 or shape.dtype.kind not in "iu" \
            or (shape < 1).any():
        raise SchemaError(f"/progress in_shape: expected 1 to 4 positive integers, got "
                          f"{_short(shape.tolist())}")
    if math.prod(int(s) for s in shape) > MAX_EXAMPLE_VALUES:
        raise SchemaError(f"/progress in_shape: {tuple(int(s) for s in shape)} holds more than "
                          f"{MAX_EXAMPLE_VALUES:,} values per example")
    return epoch, step, tuple(int(s) for s in shape)


def check_rng_state(state, what, device=False):
    """SchemaError unless ``state`` is a numpy bit generator state its generator accepts
    (with ``device``, also the GPU's philox ``{generator, seed, counter}``)."""
    if device and state is None:
        return
    if not isinstance(state, dict):
        raise SchemaError(f"{what}: expected a random generator state, got {_short(state)}")
    if device and state.get("generator") == "philox4x32_10":
        _integer(state.get("seed"), f"{what} seed", 0)
        _integer(state.get("counter"), f"{what} counter", 0)
        return
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise SchemaError(f"{what}: unknown bit generator {_short(name)}; expected one of "
                          f"{', '.join(_BIT_GENERATORS)}")
    try:
        getattr(np.random, name)().state = state
    except (TypeError, ValueError, KeyError, OverflowError) as err:
        raise SchemaError(f"{what}: not a valid {name} state ({_short(str(err), 80)})") from None


def validate(raw, version):
    """Check every entry of ``raw`` (the dict ``read_checkpoint`` read); returns the
    Checkpoint fields.  Raises :class:`SchemaError`."""
    check_config(raw["config"])
    check_params(raw["names"], raw["params"], raw["crcs"], version)
    check_optimizer_state(raw["optimizer_state"])
    check_states(raw["states"], raw["state_crcs"], raw["params"], version)
    check_layer_states(raw["layer_states"], raw["layer_state_crcs"], version)
    epoch, step, in_shape = check_progress(raw["epoch_index"], raw["step_index"],
                                           raw["in_shape"])
    batch = _count(raw["batch_index"], "/progress batch_index")
    check_rng_state(raw["rng_host"], "/rng host")
    check_rng_state(raw["rng_device"], "/rng device", device=True)
    if raw["epoch_rng"] is not None:
        check_rng_state(raw["epoch_rng"], "/rng epoch_start")
    elif batch:
        raise SchemaError("/rng epoch_start: missing, but /progress batch_index is "
                          f"{batch} (a checkpoint written inside an epoch needs it)")
    classes = check_classes(raw.get("classes"))
    return dict(config=raw["config"], params=raw["params"], states=raw["states"],
                classes=classes,
                optimizer_state=raw["optimizer_state"], layer_states=raw["layer_states"],
                epoch_index=epoch, step_index=step,
                batch_index=batch, epoch_rng=raw["epoch_rng"], in_shape=in_shape,
                rng={"host": raw["rng_host"], "device": raw["rng_device"]})
