"""Making objects from ``{type, config}`` descriptions, checking every option on the way.

A description is a mapping ``{type: ClassName, config: {option: value}}`` (``config`` may be
left out) or, where an object of a known kind is expected, just the class name.  Options are
checked against the constructor's signature before anything is made: an unknown option, a
missing required one and a value of the wrong type each give a :class:`ConfigError` whose
message starts with the key path (``layers[2].config.keep: expected a number, ...``).  A
constructor's own range check raising an error with an ``option`` attribute (the optimizers'
and schedules' :class:`~neonlite.optimizers.options.OptionError`) gets that option's path.
"""
import functools
import inspect

from . import registry
from .errors import ConfigError, did_you_mean, short_repr

# Options whose value is an object (or a list / mapping of objects) of a known kind.
OPTION_KINDS = {"init": "initializer", "bias": "initializer", "activation": "transform",
                "transform": "transform", "schedule": "schedule", "costfunc": "cost",
                "layers": "layer", "branches": "layer", "optimizer_mapping": "optimizer",
                "metric": "metric"}

_EMPTY = inspect.Parameter.empty


def type_word(value):
    """How a YAML value's type is named in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


@functools.lru_cache(maxsize=None)
def constructor_options(cls):
    """``{option: default or Parameter.empty}`` of ``cls``'s constructor, following
    ``**kwargs`` up to the base classes that receive them."""
    options = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = list(inspect.signature(klass.__init__).parameters.values())[1:]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                options.setdefault(p.name, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return options


def build(desc, kind, path):
    """Make the object of ``kind`` described by ``desc`` (see the module docstring)."""
    cls, config = _split(desc, kind, path)
    options = constructor_options(cls)
    cpath = f"{path}.config"
    kwargs = {}
    for key, value in config.items():
        if key not in options:
            raise ConfigError(f"{cpath}.{key}: unknown option of {cls.__name__}"
                              f"{did_you_mean(key, options)}")
        kwargs[key] = build_value(value, _option_kind(key, value, options[key]),
                                  f"{cpath}.{key}", options[key])
    missing = [name for name, default in options.items()
               if default is _EMPTY and name not in config]
    if missing:
        raise ConfigError(f"{cpath}: missing required option '{missing[0]}' of {cls.__name__} "
                          f"(its options: {', '.join(options)})")
    try:
        return cls(**kwargs)
    except ConfigError as err:
        option = getattr(err, "option", None)
        if option is None:
            raise
        raise ConfigError(f"{cpath}.{option}: {err}") from None
    except (TypeError, ValueError) as err:
        named = [key for key in config if key in str(err)]
        where = f"{cpath}.{named[0]}" if len(named) == 1 else cpath
        raise ConfigError(f"{where}: {err}") from None


def _split(desc, kind, path):
    """(class, config mapping) of a description."""
    word = registry.KIND_WORDS[kind]
    if isinstance(desc, str):
        return registry.lookup(kind, desc, path), {}
    if not isinstance(desc, dict):
        raise ConfigError(f"{path}: expected a {word} as {{type: Name, config: {{...}}}}, got "
                          f"{type_word(desc)} ({short_repr(desc)})")
    extra = [k for k in desc if k not in ("type", "config")]
    if extra:
        hint = did_you_mean(extra[0], ["type", "config"])
        raise ConfigError(f"{path}.{extra[0]}: unknown key{hint} (a {word} is {{type: Name, "
                          f"config: {{option: value}}}})")
    if "type" not in desc:
        raise ConfigError(f"{path}: missing 'type' (a {word} is {{type: Name, config: "
                          f"{{option: value}}}})")
    cls = registry.lookup(kind, desc["type"], f"{path}.type")
    config = desc.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}.config: expected a mapping of options, got "
                          f"{type_word(config)} ({short_repr(config)})")
    return cls, config


def _option_kind(key, value, default):
    """The kind of object an option's value describes, or None for plain data."""
    if isinstance(value, (bool, int, float)) or value is None:
        return None
    if isinstance(value, str) and isinstance(default, str):
        return None
    default_kinds = registry.kind_of_instance(default)
    if default_kinds:
        return default_kinds[0]
    if key in OPTION_KINDS:
        return OPTION_KINDS[key]
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        found = registry.kind_of_name(value["type"])
        if len(found) == 1:
            return found[0]
    return None


def build_value(value, kind, path, default=_EMPTY):
    """An option's value: objects of ``kind`` built (inside lists and mappings too), plain
    data checked against the type of the option's default."""
    if kind is None:
        check_type(value, default, path)
        return value
    if isinstance(value, list):
        return [build_value(v, kind, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and "type" not in value and kind == "optimizer":
        return {k: build_value(v, kind, f"{path}.{k}") for k, v in value.items()}
    return build(value, kind, path)


def check_type(value, default, path):
    """A :class:`ConfigError` when ``value`` cannot stand for an option whose default is
    ``default`` (booleans for booleans, numbers for numbers, strings for strings; integer
    options may also be given as lists, e.g. a (height, width) pair)."""
    if default is _EMPTY or default is None or value is None:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        expected = "true or false"
    elif isinstance(default, int):
        ok = (isinstance(value, int) and not isinstance(value, bool)) or \
            isinstance(value, (list, dict))
        expected = "an integer"
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        expected = "a number"
    elif isinstance(default, str):
        ok = isinstance(value, str)
        expected = "a string"
    else:
        return
    if not ok:
        raise ConfigError(f"{path}: expected {expected}, got {type_word(value)} "
                          f"({short_repr(value)})")
