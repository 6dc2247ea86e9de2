"""Layer sizes taken from the data: ``vocab: auto`` and ``nout: auto``.

In a run's layers, the value ``auto`` of a ``vocab`` option (Embedding) or an ``nout`` option
(the output layer) stands for the data's size: the vocabulary of a text data set (its number
of distinct characters, or of the characters its ``vocab`` option lists), the number of
classes (``nclass``) of any other.  A text data set with whole-sequence labels (``nclass``
and a ``vocab``: :class:`~neonlite.data.text_sequences.TextSequences` with ``task: label``)
gives ``vocab: auto`` its vocabulary and ``nout: auto`` its number of classes.  A layer that
requires ``vocab`` and leaves it out gets ``auto`` too.  The YAML is checked with a stand-in size when it is read
(:data:`STAND_IN`), and the layers are built with the real size once the data is loaded
(``RunConfig.size_layers``); the checkpoint records the real size.

:func:`check_fits_data` checks a given size against a text data set before training: a
vocabulary smaller than the data's is an error naming the largest token id; a larger one a
warning (it trains; the extra rows are never used)."""
import copy
import inspect
import warnings

from . import registry
from .build import constructor_options
from .errors import ConfigError

AUTO = "auto"
#: the options whose value may be ``auto``
AUTO_OPTIONS = ("vocab", "nout")
#: the options that, required by a layer and left out, mean ``auto``
IMPLICIT = ("vocab",)
#: the size ``auto`` stands for while the YAML is checked, before the data is read: large
#: enough for any ``pad_id``, and a multiple of every block size (block-sparse layers)
STAND_IN = 1 << 15


def auto_entries(layers):
    """The key paths (``layers[0].config.vocab``, ...) of the ``auto`` sizes in the layer
    descriptions ``layers`` (left-out required ``vocab`` options included)."""
    found = []
    _walk(copy.deepcopy(layers), "layers", lambda config, key, path: found.append(path))
    return found


def fill_auto(layers, size):
    """A copy of the layer descriptions ``layers`` with every ``auto`` size set to ``size``
    (an int, or a dict option -> int: :func:`data_size`'s)."""
    layers = copy.deepcopy(layers)

    def fill(config, key, path):
        config[key] = size[key] if isinstance(size, dict) else size
    _walk(layers, "layers", fill)
    return layers


def data_size(data):
    """What ``auto`` stands for with data set ``data``, per option: ``vocab`` its
    vocabulary's length (text), else its number of classes; ``nout`` its number of classes,
    else its vocabulary's length."""
    vocab = getattr(data, "vocab", None)
    words = len(vocab) if vocab is not None else None
    classes = getattr(data, "nclass", None)
    sizes = {"vocab": words if words is not None else classes,
             "nout": classes if classes is not None else words}
    if not all(isinstance(size, int) and size >= 1 for size in sizes.values()):
        raise ConfigError(f"layers: a size given as 'auto' needs a data set that knows its "
                          f"vocabulary or its number of classes; data set "
                          f"{getattr(data, 'name', '?')!r} does not (give nclass, or the size)")
    return sizes


def _walk(value, path, visit):
    if isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", visit)
        return
    if not isinstance(value, dict):
        return
    cls = _layer_class(value.get("type"))
    if cls is not None:
        if value.get("config") is None:
            value["config"] = {}
        config = value["config"]
        if not isinstance(config, dict):
            return  # building the layer says what is wrong with it
        options = constructor_options(cls)
        for key in AUTO_OPTIONS:
            left_out = key in IMPLICIT and key not in config and \
                options.get(key) is inspect.Parameter.empty
            if key in options and (config.get(key) == AUTO or left_out):
                visit(config, key, f"{path}.config.{key}")
        value, path = config, f"{path}.config"
    for key, item in value.items():
        if isinstance(item, (list, dict)):
            _walk(item, f"{path}.{key}", visit)


def _layer_class(name):
    return registry.classes("layer").get(name) if isinstance(name, str) else None


def check_fits_data(model, data):
    """Before training on a text data set ``data``: a ConfigError when an embedding's
    ``vocab`` or (for next-token targets, a data set without ``nclass``) the output's width
    is smaller than the data's vocabulary (token ids run to ``len(vocab) - 1``); a warning
    when an embedding's is larger."""
    vocab = getattr(data, "vocab", None)
    if vocab is None:
        return
    size, name = len(vocab), getattr(data, "name", "the text")
    for leaf in model.layers.leaves():
        given = getattr(leaf, "vocab", None)
        if not isinstance(given, int):
            continue
        where = f"{getattr(leaf, '_config_path', leaf.name)}.config.vocab"
        if given < size:
            raise ConfigError(f"{where}: {given} is too small for {name}: its {size} distinct "
                              f"characters are token ids 0..{size - 1}, and the largest, "
                              f"{size - 1}, needs vocab >= {size} (vocab: auto sizes it to "
                              f"the data)")
        if given > size:
            warnings.warn(f"{where}: {given} is larger than the {size} distinct characters of "
                          f"{name}: rows {size}..{given - 1} of the embedding are never used "
                          f"(vocab: auto sizes it to the data)", UserWarning, stacklevel=2)
    width = model.out_shape[-1] if model.out_shape else None
    if width is not None and width < size and getattr(data, "nclass", None) is None:
        last = getattr(model.layers.layers[-1], "_config_path", "the output layer")
        raise ConfigError(f"{last}: the output has {width} classes, too few for {name}: its "
                          f"target ids run to {size - 1} ({size} characters; nout: auto sizes "
                          f"it to the data)")
