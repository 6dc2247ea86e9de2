"""The neonlite classes a description may name, by kind.

A kind (``layer``, ``initializer``, ``transform``, ``cost``, ``metric``, ``optimizer``,
``schedule``, ``callback``) is every concrete subclass of its base class defined in a
``neonlite.*`` module, found when asked (so layers added in new modules are nameable as soon as
``neonlite.layers`` imports them).  Classes defined elsewhere (a user's script, a test) cannot
be named: a description never makes arbitrary objects.
"""
import importlib

from .errors import ConfigError, did_you_mean, short_repr

# kind -> (module to import, base class name, extra class names, base names to leave out)
_KINDS = {
    "layer": ("neonlite.layers", "Layer", (), ("Layer", "ParameterLayer", "CompoundLayer")),
    "initializer": ("neonlite.initializers", "Initializer", (), ("Initializer",)),
    "transform": ("neonlite.transforms", "Transform", (), ("Transform",)),
    "cost": ("neonlite.transforms", "Cost", ("neonlite.layers:GeneralizedCost",), ("Cost",)),
    "metric": ("neonlite.transforms", "Metric", (), ("Metric",)),
    "optimizer": ("neonlite.optimizers", "Optimizer",
                  ("neonlite.optimizers:MultiOptimizer",), ("Optimizer",)),
    "schedule": ("neonlite.optimizers", "Schedule", (), ()),
    "callback": ("neonlite.callbacks", "Callback", (), ("Callback",)),
}

# What a kind is called in messages.
KIND_WORDS = {"layer": "layer", "initializer": "initializer", "transform": "activation",
              "cost": "cost", "metric": "metric", "optimizer": "optimizer",
              "schedule": "schedule", "callback": "callback"}


# Names other frameworks use for neonlite classes, offered as "did you mean".
ALIASES = {"relu": "Rectlin", "leakyrelu": "Rectlin", "sigmoid": "Logistic", "dense": "Affine",
           "fullyconnected": "Affine", "conv2d": "Conv", "convolution2d": "Conv",
           "maxpool": "Pooling", "maxpool2d": "Pooling", "maxpooling2d": "Pooling",
           "avgpool2d": "Pooling", "batchnormalization": "BatchNorm", "batchnorm2d": "BatchNorm",
           "sgd": "GradientDescentMomentum", "crossentropy": "CrossEntropyMulti",
           "categoricalcrossentropy": "CrossEntropyMulti", "mse": "MeanSquared",
           "identity": "Identity", "linear": "Linear"}


def kinds():
    return list(_KINDS)


def _subclasses(base):
    found, todo = [], [base]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def classes(kind):
    """``{class name: class}`` of the nameable classes of ``kind``."""
    module_name, base_name, extras, left_out = _KINDS[kind]
    module = importlib.import_module(module_name)
    base = getattr(module, base_name)
    table = {}
    for cls in [base] + _subclasses(base):
        if (cls.__module__.startswith("neonlite.") and cls.__name__ not in left_out
                and not cls.__name__.startswith("_")
                and getattr(cls, "describable", True)):
            table.setdefault(cls.__name__, cls)
    for extra in extras:
        mod, name = extra.split(":")
        table[name] = getattr(importlib.import_module(mod), name)
    return table


def lookup(kind, name, path):
    """The class of ``kind`` called ``name``; a :class:`ConfigError` at ``path`` otherwise."""
    table = classes(kind)
    if not isinstance(name, str):
        raise ConfigError(f"{path}: expected the name of a {KIND_WORDS[kind]} (a string), got "
                          f"{short_repr(name)}")
    if name in table:
        return table[name]
    alias = ALIASES.get(name.lower().replace("_", ""))
    hint = f"; did you mean '{alias}'?" if alias in table else did_you_mean(name, table)
    raise ConfigError(f"{path}: unknown {KIND_WORDS[kind]} {short_repr(name)}{hint}")


def kind_of_name(name):
    """The kinds that have a class called ``name``."""
    return [kind for kind in _KINDS if name in classes(kind)]


def kind_of_instance(obj):
    """The kinds whose nameable classes include ``type(obj)``."""
    return [kind for kind in _KINDS if classes(kind).get(type(obj).__name__) is type(obj)]
