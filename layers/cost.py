"""GeneralizedCost: applies a cost function to the model's output and starts bprop."""
from .activation import Activation
from .layer import ShapeError


class GeneralizedCost:
    """Wraps a cost (``neonlite.transforms``) with its delta buffer (N,) + output shape.

    If the model's last leaf layer is the activation the cost fuses with (Softmax for
    CrossEntropyMulti, Logistic for CrossEntropyBinary), the gradient is taken with respect to
    that activation's input in one fused step and the activation passes it through.
    """

    def __init__(self, costfunc, name=None):
        self.costfunc = costfunc
        self.name = name or "cost"
        self.fused_layer = None

    def initialize(self, last_leaf, out_shape, be):
        self.be = be
        self.out_shape = tuple(out_shape)
        self.deltas = be.zeros((be.bsz,) + self.out_shape)
        self.work = be.zeros((1,) * (len(self.out_shape) + 1))
        fuses = self.costfunc.fuses_with
        fused = (fuses is not None and isinstance(last_leaf, Activation)
                 and isinstance(last_leaf.transform, fuses))
        if isinstance(last_leaf, Activation):
            last_leaf.fused_with_cost = fused
        self.fused_layer = last_leaf if fused else None

    def check_targets(self, target_shape):
        if tuple(target_shape) != self.out_shape:
            raise ShapeError(f"the data set's targets have shape {tuple(target_shape)} per "
                             f"example but the model's output has shape {self.out_shape}")

    def cost(self, y, t):
        """The cost of outputs y against targets t, as a Python float."""
        return self.costfunc.cost(self.be, y, t, self.work)

    def cost_and_errors(self, y, t):
        """(cost as a float, delta tensor to feed bprop) for one batch."""
        if self.fused_layer is not None:
            value = self.costfunc.fused(self.be, self.fused_layer.x, y, t, self.deltas)
            return (self.cost(y, t) if value is None else value), self.deltas
        self.costfunc.bprop(self.be, y, t, self.deltas)
        return self.cost(y, t), self.deltas

    def get_description(self):
        return {"type": "GeneralizedCost", "config": {"costfunc": self.costfunc.get_description()}}
