"""A model as plain bytes: what ``pickle`` and ``copy.deepcopy`` of a
:class:`~neonlite.model.Model` are made of.

An initialized model is the bytes of its checkpoint (:mod:`neonlite.serialize`: description,
parameters, buffers, optimizer states, counters, RNG state, metric); one not yet initialized
is the YAML text of its description.  Rebuilding reads them the way ``Model.load`` and
``Model.from_description`` do, through the checkpoint's schema checks: nothing but numbers,
arrays and text is read, and only the classes a description may name are made (never an
arbitrary object, whatever the bytes hold).  The rebuilt model is new (its own layers) and
lives on the current backend; it computes what the original computes.  The cost and the
optimizer are not part of it: give them to ``fit`` again.
"""
import tempfile
from pathlib import Path
from .config.yaml_io import dump_yaml, parse_yaml

CHECKPOINT, DESCRIPTION = "checkpoint", "description"


def model_state(model):
    """``(kind, data, name)``: ``(CHECKPOINT, checkpoint bytes, name)`` for an initialized
    model, ``(DESCRIPTION, YAML text, name)`` for one not yet initialized."""
    if model.in_shape is None:
        return DESCRIPTION, dump_yaml({"layers": model.get_description()["layers"]}), model.name
    with tempfile.TemporaryDirectory(prefix="neonlite-model-") as folder:
        path = Path(folder) / "model.h5"
        model.save(path)
        return CHECKPOINT, path.read_bytes(), model.name


def rebuild(cls, kind, data, name):
    """The model of :func:`model_state`'s ``(kind, data, name)``, made as a ``cls``."""
    if kind == DESCRIPTION and isinstance(data, str):
        model = cls.from_description(parse_yaml(data, "<pickled model>"))
    elif kind == CHECKPOINT and isinstance(data, bytes):
        with tempfile.TemporaryDirectory(prefix="neonlite-model-") as folder:
            path = Path(folder) / "pickled-model.h5"
            path.write_bytes(data)
            model = cls.load(path)
    else:
        raise TypeError(f"not a pickled neonlite model: expected ({CHECKPOINT!r}, bytes) or "
                        f"({DESCRIPTION!r}, text), got ({kind!r}, {type(data).__name__})")
    if isinstance(name, str):
        model.name = name
    return model
