"""MultiOptimizer: a different optimizer per layer name or layer type."""
from ..config.errors import short_repr
from .optimizer import Optimizer
from .options import OptionError, Text, check_options


class MultiOptimizer:
    """``MultiOptimizer({"default": opt, "Bias": opt2, "fc_out": opt3})``.

    A parameter goes to the optimizer keyed by its layer's name if there is one, else by its
    layer's class name (``Linear``, ``Bias``, ``Convolution``, ``BatchNorm``, ...), else to
    ``"default"`` (required).  Every entry is one :class:`~.optimizer.Optimizer`: a
    MultiOptimizer inside another is refused (its keys would pick among the same parameters
    again: write its entries into the outer mapping instead), and so is any other object.
    Once the model is known (:meth:`check_parameters`, called by ``Model.fit`` before the
    first step) every key but ``default`` must name a layer that has parameters, by name or
    by type.
    """

    OPTIONS = {"name": Text()}

    def __init__(self, optimizer_mapping, name=None):
        check_options(self, name=name)
        if not isinstance(optimizer_mapping, dict):
            raise OptionError(f"MultiOptimizer: optimizer_mapping must be a mapping from layer "
                              f"names or types to optimizers, got "
                              f"{short_repr(optimizer_mapping)}", "optimizer_mapping")
        if "default" not in optimizer_mapping:
            raise OptionError("MultiOptimizer needs a 'default' entry in its mapping, got keys "
                              f"{sorted(map(str, optimizer_mapping))}", "optimizer_mapping")
        for key, entry in optimizer_mapping.items():
            _check_entry(key, entry)
        self.mapping = dict(optimizer_mapping)
        self.name = name or "MultiOptimizer"

    def optimizer_for(self, param):
        layer = param.layer
        return self.mapping.get(layer.name) or self.mapping.get(type(layer).__name__) or \
            self.mapping["default"]

    def check_parameters(self, params):
        """OptionError when a key other than ``default`` names no layer of ``params`` (the
        model's parameters) by name or by class name: its optimizer would never run."""
        names = {}
        for param in params:
            names.setdefault(param.layer.name, set()).add(type(param.layer).__name__)
        known = set(names) | {kind for kinds in names.values() for kind in kinds}
        unknown = [key for key in self.mapping if key != "default" and key not in known]
        if unknown:
            layers = ", ".join(f"{name} ({'/'.join(sorted(kinds))})"
                               for name, kinds in names.items())
            raise OptionError(f"MultiOptimizer: optimizer_mapping key {short_repr(unknown[0])} "
                              f"names no layer with parameters, by name or by type; the "
                              f"model's layers with parameters: {short_repr(layers, 300)}",
                              f"optimizer_mapping.{unknown[0]}")

    def _groups(self, params):
        groups = {}
        for param in params:
            groups.setdefault(id(self.optimizer_for(param)), (self.optimizer_for(param), []))[1] \
                .append(param)
        return groups.values()

    def optimize(self, params, epoch):
        for optimizer, group in self._groups(params):
            optimizer.optimize(group, epoch)

    def updated_finite(self, params):
        """True when every group's optimizer says so of its group (``Optimizer.updated_finite``)."""
        return all(optimizer.updated_finite(group) for optimizer, group in self._groups(params))

    @property
    def step(self):
        return self.mapping["default"].step

    def get_description(self):
        return {"type": "MultiOptimizer",
                "config": {"optimizer_mapping": {k: v.get_description()
                                                 for k, v in self.mapping.items()}}}


def _check_entry(key, entry):
    """OptionError unless ``key`` is text and ``entry`` one Optimizer."""
    where = f"optimizer_mapping.{key}"
    if not isinstance(key, str) or not key:
        raise OptionError(f"MultiOptimizer: optimizer_mapping keys must be layer names or layer "
                          f"types (text), got {short_repr(key)}", "optimizer_mapping")
    if isinstance(entry, MultiOptimizer):
        raise OptionError(f"MultiOptimizer: optimizer_mapping entry {short_repr(key)} is itself "
                          f"a MultiOptimizer; nesting is not supported (its keys would choose "
                          f"among the same parameters again): put its entries in the outer "
                          f"mapping", where)
    if not isinstance(entry, Optimizer):
        raise OptionError(f"MultiOptimizer: optimizer_mapping entry {short_repr(key)} must be an "
                          f"optimizer (GradientDescentMomentum, Adam, ...), got "
                          f"{short_repr(entry)}", where)
