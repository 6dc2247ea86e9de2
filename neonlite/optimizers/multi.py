"""MultiOptimizer: a different optimizer per layer name or layer type."""


class MultiOptimizer:
    """``MultiOptimizer({"default": opt, "Bias": opt2, "fc_out": opt3})``.

    A parameter goes to the optimizer keyed by its layer's name if there is one, else by its
    layer's class name (``Linear``, ``Bias``, ``Convolution``, ``BatchNorm``, ...), else to
    ``"default"`` (required).
    """

    def __init__(self, optimizer_mapping, name=None):
        if "default" not in optimizer_mapping:
            raise ValueError("MultiOptimizer needs a 'default' entry in its mapping, got keys "
                             f"{sorted(optimizer_mapping)}")
        self.mapping = dict(optimizer_mapping)
        self.name = name or "MultiOptimizer"

    def optimizer_for(self, param):
        layer = param.layer
        return self.mapping.get(layer.name) or self.mapping.get(type(layer).__name__) or \
            self.mapping["default"]

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
