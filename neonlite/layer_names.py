"""Checks that a model's layer names can name its parameters in a checkpoint
(``"<layer name>.<parameter>"``): printable, valid UTF-8, and unique where they would clash."""
from .layers.layer import Layer, ParameterLayer
from .config.errors import ConfigError, short_repr


def check_layer_names(leaves):
    """A ConfigError (at the layer's key path) for a layer name that cannot name parameters in
    a checkpoint: not printable UTF-8 text, or shared by two layers with parameters or buffers
    of the same kind (their ``"<name>.<param>"`` would clash)."""
    seen = {}
    for leaf in leaves:
        where = getattr(leaf, "_config_path", None)
        where = f"{where}.config.name" if where else f"layer {short_repr(leaf.name)}"
        if not isinstance(leaf.name, str) or not leaf.name.isprintable() or not leaf.name:
            raise ConfigError(f"{where}: a layer name must be printable text, got "
                              f"{short_repr(leaf.name)}")
        try:
            leaf.name.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{where}: a layer name must be valid UTF-8 text, got "
                              f"{short_repr(leaf.name)}") from None
        key = (leaf.name, type(leaf).__name__)
        if isinstance(leaf, ParameterLayer) or type(leaf).buffers is not Layer.buffers:
            if key in seen:
                raise ConfigError(f"{where}: two {key[1]} layers are both named {key[0]!r} "
                                  f"(the other: {seen[key]}), so their parameters would clash; "
                                  f"give the layers distinct names")
            seen[key] = getattr(leaf, "_config_path", None) or key[0]


def check_tensor_names(leaves):
    """A ConfigError when two allocated layers give a parameter or buffer the same
    ``"<layer name>.<key>"`` (e.g. an Affine named like a Conv's compound, ``Conv_0``)."""
    owner = {}
    for leaf in leaves:
        keys = [p.name for p in leaf.parameters()] + [f"{leaf.name}.{k}" for k in leaf.buffers()]
        for key in keys:
            other = owner.setdefault(key, leaf)
            if other is not leaf:
                where = getattr(leaf, "_config_path", None) or f"layer {leaf.name!r}"
                raise ConfigError(f"{where}: the name {leaf.name!r} is also the name of the "
                                  f"{type(other).__name__} layer {other.name!r}, so both would "
                                  f"store a parameter '{key}'; give the layers distinct names")
