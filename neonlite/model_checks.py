"""The checks :class:`~neonlite.model.Model` makes of what a Python script gives it, each
before anything runs: one layer object in one model only, the backend the model was built on
still the current one, the data set's targets fitting the outputs, the values ``set_params``
takes, and the optimizer fitting the model.

Each raises one of the project's exception classes with one line saying what, where, and
what was expected."""
import weakref

import numpy as np

from .backends import get_backend
from .config.errors import ConfigError, short_repr
from .data.iterator import DataError
from .layers.layer import ShapeError
from .optimizers.options import MAX_COUNT


class BackendChanged(RuntimeError):
    """The current backend is not the one a model was initialized on, and runs another batch
    size, data type or device: the model's tensors cannot be used with it."""


def claim_layers(model, top):
    """Record ``model`` as the owner of every layer under ``top`` (containers included); a
    :class:`ConfigError` when one already belongs to another living model, or appears twice
    in this one (a layer object holds its own buffers and parameters: used in two places,
    each use would overwrite the other's)."""
    layers = _all_layers(top)
    seen = set()
    for layer in layers:
        if id(layer) in seen:
            raise ConfigError(f"layer {short_repr(layer.name)} ({type(layer).__name__}) appears "
                              f"twice in model {short_repr(model.name)}; a layer object can be "
                              f"used once: make a second layer (weights are shared with "
                              f"TiedLinear, not by reusing a layer)")
        seen.add(id(layer))
        owner = getattr(layer, "_owner_model", None)
        owner = owner() if owner is not None else None
        if owner is not None and owner is not model:
            raise ConfigError(f"layer {short_repr(layer.name)} ({type(layer).__name__}) already "
                              f"belongs to model {short_repr(owner.name)}; a layer object holds "
                              f"that model's parameters and buffers, so a second model using it "
                              f"would overwrite them: make new layers for the second model, or "
                              f"copy.deepcopy the first model")
    ref = weakref.ref(model)
    for layer in layers:
        layer._owner_model = ref


def _all_layers(top):
    """Every layer under ``top`` (through containers' ``layers`` and ``branches``: what a
    script puts together), ``top`` first, depth first."""
    found, todo = [], [top]
    while todo:
        layer = todo.pop()
        found.append(layer)
        children = list(getattr(layer, "layers", None) or []) + \
            list(getattr(layer, "branches", None) or [])
        todo.extend(reversed([c for c in children if hasattr(c, "leaves")]))
    return found


def backend_settings(be):
    """``(name, batch size, dtype name)`` of backend ``be``, for comparisons and messages."""
    dtype = getattr(be, "dtype", None)
    return (getattr(be, "name", type(be).__name__), int(be.bsz),
            np.dtype(dtype).name if dtype is not None else "?")


def check_backend(model):
    """:class:`BackendChanged` when ``gen_backend`` made a backend of other settings (batch
    size, data type, kind) after ``model`` was initialized on its own.  A new backend of the
    same settings is fine: the model goes on using its own."""
    current = get_backend()
    if current is model.be:
        return
    built, now = backend_settings(model.be), backend_settings(current)
    if built != now:
        raise BackendChanged(
            f"model {short_repr(model.name)} was initialized on backend {built[0]} (batch "
            f"{built[1]}, {built[2]}), but the current backend is {now[0]} (batch {now[1]}, "
            f"{now[2]}): a model's tensors stay on the backend they were made on; "
            f"copy.deepcopy(model) (or save and Model.load) after gen_backend makes it again on "
            f"the current backend, or call gen_backend with the model's settings")


def param_value(key, value, tensor):
    """``value`` (array-like) as an array ``tensor.set`` can take without losing meaning: a
    float parameter takes real floating-point values (float16/32/64, converted to its dtype,
    which must hold them: a finite value may not become inf); an integer buffer takes
    integers its dtype holds.  A TypeError or ValueError naming ``key`` otherwise (an int32
    array for a float weight is refused, not converted: it is almost always a mistake)."""
    array = np.asarray(value)
    target = np.dtype(tensor.dtype)
    wants_float = target.kind == "f" or getattr(tensor, "storage", None) in ("f16", "bf16")
    if wants_float:
        if array.dtype.kind != "f":
            raise TypeError(f"set_params: parameter {key!r} is floating-point ({target}); got "
                            f"an array of dtype {array.dtype}: convert it explicitly "
                            f"(.astype(np.float32)) if its values are weights")
        if target.kind == "f" and array.dtype.itemsize > target.itemsize and array.size:
            finite = array[np.isfinite(array)]
            if finite.size and np.abs(finite).max() > np.finfo(target).max:
                raise ValueError(f"set_params: parameter {key!r}: values beyond the range of "
                                 f"{target} (largest {np.finfo(target).max:g}) would become "
                                 f"inf")
        return array
    if array.dtype.kind not in "iu":
        raise TypeError(f"set_params: buffer {key!r} holds integers ({target}); got an array of "
                        f"dtype {array.dtype}")
    info = np.iinfo(target)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise ValueError(f"set_params: buffer {key!r}: values outside [{info.min}, {info.max}] "
                         f"do not fit its dtype {target}")
    return array


def check_data_shape(model, dataset, in_shape):
    """The example shape ``in_shape`` of ``dataset`` fits ``model`` (initialized): the shape
    it was built for, or, for a model of sequences of at most T steps, sequences (T', ...) of
    1 <= T' <= T steps with the rest of the shape the same.  Returns the model's output shape
    for those examples; a :class:`ShapeError` naming the data set and both shapes otherwise
    (a longer sequence: the first layer, the length and the maximum)."""
    built, name = model.in_shape, getattr(dataset, "name", "data")
    if in_shape == built:
        return model.out_shape
    top = model.layers
    if top.max_steps is not None and len(in_shape) == len(built) and \
            in_shape[1:] == built[1:] and len(in_shape) >= 1:
        if 1 <= in_shape[0] <= built[0]:
            out = tuple(model.out_shape)
            return (in_shape[0],) + out[1:] if top.out_stepped else out
        first = top.leaves()[0]
        raise ShapeError(f"the data set '{name}' has sequences of {in_shape[0]} steps, longer "
                         f"than the maximum of {built[0]} that layer '{first.name}' "
                         f"({type(first).__name__}) of model '{model.name}' was built for")
    raise ShapeError(f"model '{model.name}' was built for inputs of shape {built} per "
                     f"example, but the data set '{name}' has shape {in_shape}")


def check_targets(dataset, out_shape):
    """The data set's targets fit outputs of ``out_shape``: the same shape, or class indices
    (out_shape[:-1]) of ``dataset.nclass`` (when it says) = out_shape[-1] classes."""
    target_shape = getattr(dataset, "target_shape", None)
    if target_shape is None:
        return
    target_shape, out_shape = tuple(target_shape), tuple(out_shape)
    nclass = getattr(dataset, "nclass", None)
    if out_shape and target_shape == out_shape[:-1] and nclass not in (None, out_shape[-1]):
        raise ShapeError(f"the data set's targets have shape {target_shape + (nclass,)} per "
                         f"example (class indices of {nclass} classes) but the model's output "
                         f"has shape {out_shape}")
    if target_shape != out_shape and not (out_shape and target_shape == out_shape[:-1]):
        raise ShapeError(f"the data set's targets have shape {target_shape} per example "
                         f"but the model's output has shape {out_shape}")


def check_pad_targets(dataset, cost):
    """A data set whose pad positions have targets (``pad_target``: a
    :class:`~neonlite.data.sequences.SequenceIterator` of a language model gives them its
    ``ignore_index``) trains only with a cost that leaves exactly those targets out: else the
    pads would count in the loss as a class, or fail as one.  A DataError naming both
    values otherwise."""
    pad = getattr(dataset, "pad_target", None)
    if pad is None or cost is None:
        return
    ignored = getattr(getattr(cost, "costfunc", cost), "ignore_index", None)
    if ignored != pad:
        name = getattr(dataset, "name", "data")
        raise DataError(f"the data set '{name}' gives its pad positions the target {pad} "
                         f"(its ignore_index), but the cost's ignore_index is {ignored}; give "
                         f"the cost ignore_index={pad} (YAML: costfunc: {{type: "
                         f"CrossEntropyMulti, config: {{ignore_index: {pad}}}}}) so pads add "
                         f"nothing to the loss")


def check_optimizer(optimizer, model):
    """Before training: the optimizer's own check of the model's parameters (a
    MultiOptimizer's keys must name layers that have them), where it has one; and room for
    the model's and the optimizer's counters to count on (at most ``MAX_COUNT``, 2**62: a
    checkpoint stores them as int64)."""
    check = getattr(optimizer, "check_parameters", None)
    if check is not None:
        check(model.parameters())
    for what, value in (("epoch_index", model.epoch_index), ("step_index", model.step_index),
                        ("the optimizer's step", getattr(optimizer, "step", 0))):
        if value > MAX_COUNT:
            raise ValueError(f"model {short_repr(model.name)}: {what} is {value}, which leaves "
                             f"no room to train on (counters go up to 2**62 = {MAX_COUNT}; a "
                             f"checkpoint stores them as int64)")
