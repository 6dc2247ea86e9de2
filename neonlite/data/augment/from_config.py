"""A :class:`~neonlite.data.augment.pipeline.Pipeline` from its YAML description.

``augment: [{type: pad_crop, config: {size: 32, pad: 4}}, {type: flip}, ...]``: each entry is
``{type: name, config: {option: value}}`` (``config`` may be left out, a bare name is short
for ``{type: name}``), the options being the op's constructor arguments; from Python, op
objects may stand in the list too.  Every error starts
with the entry's key path (``augment[0].config.size: ...``).
"""
import difflib
import inspect

from ..errors import DataError
from .colour import ColorJitter, Normalize
from .geometry import CenterCrop, Flip, PadCrop, RandomResizedCrop, Resize
from .op import AugmentOp
from .pipeline import Pipeline

OPS = {cls.yaml_name: cls for cls in (PadCrop, Flip, RandomResizedCrop, Resize, CenterCrop,
                                      ColorJitter, Normalize)}


def _hint(name, names):
    close = difflib.get_close_matches(str(name).lower(), list(names), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else f" (one of {', '.join(names)})"


def op_options(cls):
    """``{option: default or Parameter.empty}`` of op class ``cls``."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {p.name: p.default for p in params}


def op_from_config(desc, path):
    """One op from ``{type, config}`` (or a bare type name, or the op itself) at key path
    ``path``."""
    if isinstance(desc, AugmentOp):
        return desc
    if isinstance(desc, str):
        desc = {"type": desc}
    if not isinstance(desc, dict):
        raise DataError(f"{path}: expected an augmentation op as {{type: name, config: "
                        f"{{...}}}}, got {desc!r}")
    extra = [k for k in desc if k not in ("type", "config")]
    if extra:
        raise DataError(f"{path}.{extra[0]}: unknown key (an augmentation op is {{type: name, "
                        f"config: {{option: value}}}})")
    name = desc.get("type")
    if not isinstance(name, str) or name.lower() not in OPS:
        raise DataError(f"{path}.type: unknown augmentation op {name!r}{_hint(name, OPS)}")
    cls = OPS[name.lower()]
    config = desc.get("config") or {}
    if not isinstance(config, dict):
        raise DataError(f"{path}.config: expected a mapping of options, got {config!r}")
    options = op_options(cls)
    for key in config:
        if key not in options:
            raise DataError(f"{path}.config.{key}: unknown option of {name}"
                            f"{_hint(key, options)}")
    missing = [k for k, v in options.items() if v is inspect.Parameter.empty and k not in config]
    if missing:
        raise DataError(f"{path}.config: missing required option '{missing[0]}' of {name}")
    try:
        return cls(**config)
    except DataError as err:
        message = str(err).split(": ", 1)[-1]
        named = [k for k in options if message.startswith(k + " ") or f" {k}=" in message]
        where = f"{path}.config.{named[0]}" if named else f"{path}.config"
        raise DataError(f"{where}: {err}") from None


def pipeline_from_config(items, path="augment", train=True):
    """The :class:`Pipeline` of YAML list ``items``, training or not as ``train`` says (a
    Pipeline is returned as it is; None and [] are the empty pipeline)."""
    if isinstance(items, Pipeline):
        return items
    if items is None:
        items = []
    if not isinstance(items, (list, tuple)):
        raise DataError(f"{path}: expected a list of augmentation ops ({', '.join(OPS)}), got "
                        f"{items!r}")
    ops = [op_from_config(item, f"{path}[{i}]") for i, item in enumerate(items)]
    return Pipeline(ops, train, path)
