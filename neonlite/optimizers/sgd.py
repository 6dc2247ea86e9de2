"""Stochastic gradient descent with momentum."""
from .fused_form import FusedForm
from .optimizer import Optimizer
from .options import NON_NEGATIVE, UNIT_OPEN, Flag, check_options, option_error


class GradientDescentMomentum(Optimizer):
    """g = grad + wdecay * w;  v = momentum * v - lr * g;
    w += v (or, with ``nesterov``, w += momentum * v - lr * g), in one pass over memory (or one
    fused call over the parameter arena).  ``decay_exclude`` (see :mod:`.optimizer`) leaves
    parameters out of ``wdecay``."""

    OPTIONS = {"momentum_coef": UNIT_OPEN, "wdecay": NON_NEGATIVE, "nesterov": Flag()}

    def __init__(self, learning_rate, momentum_coef=0.0, wdecay=0.0, nesterov=False,
                 schedule=None, gradient_clip_norm=None, gradient_clip_value=None, name=None,
                 decay_exclude=()):
        super().__init__(learning_rate, schedule, gradient_clip_norm, gradient_clip_value, name,
                         decay_exclude)
        checked = check_options(self, momentum_coef=momentum_coef, wdecay=wdecay,
                                nesterov=nesterov)
        if nesterov and checked["momentum_coef"] == 0.0:
            raise option_error(self, "nesterov", nesterov, "false when momentum_coef is 0 "
                               "(Nesterov momentum needs momentum_coef > 0)")
        self.momentum_coef, self.wdecay = checked["momentum_coef"], checked["wdecay"]
        self.nesterov = checked["nesterov"]

    def update(self, be, param, grad, lr):
        w = param.value
        if self.wdecay and self.decays(param):
            grad = grad + self.wdecay * w
        if self.momentum_coef == 0.0:
            w[:] = w - lr * grad
            return
        v = self.state(be, param, "velocity")
        new_w = w + self.momentum_coef * v - lr * grad if self.nesterov else w + v
        be.execute_multi([(v, self.momentum_coef * v - lr * grad), (w, new_w)])

    def fused_form(self, lr):
        if self.momentum_coef == 0.0:
            return FusedForm("sgd", (lr,), wdecay=self.wdecay)
        return FusedForm("nesterov" if self.nesterov else "momentum", (lr, self.momentum_coef),
                         ("velocity",), wdecay=self.wdecay)

    def _config(self):
        return {"momentum_coef": self.momentum_coef, "wdecay": self.wdecay,
                "nesterov": self.nesterov}
