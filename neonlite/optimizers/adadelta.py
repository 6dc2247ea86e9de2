"""Adadelta (Zeiler 2012), one pass over memory per step: both running averages, the step and
the weights together."""
from .optimizer import Optimizer
from .options import POSITIVE, UNIT_OPEN, check_options


class Adadelta(Optimizer):
    """Per parameter, with decay rho and epsilon eps:

        s = rho s + (1 - rho) g^2
        d = sqrt(u + eps) / sqrt(s + eps) * g
        u = rho u + (1 - rho) d^2
        w -= learning_rate * d

    (``learning_rate`` 1.0 is Zeiler's rule, PyTorch's default.)  States: ``sq_avg`` (s),
    ``delta`` (d) and ``delta_sq_avg`` (u), each the parameter's shape.  Written as one
    ``execute_multi`` of op-trees, so each backend fuses it where it can; it has no form in a
    fused all-parameter optimizer kernel and runs per parameter."""

    OPTIONS = {"decay": UNIT_OPEN, "epsilon": POSITIVE}

    def __init__(self, decay=0.95, epsilon=1e-6, learning_rate=1.0, schedule=None,
                 gradient_clip_norm=None, gradient_clip_value=None, name=None):
        super().__init__(learning_rate, schedule, gradient_clip_norm, gradient_clip_value, name)
        checked = check_options(self, decay=decay, epsilon=epsilon)
        self.decay, self.epsilon = checked["decay"], checked["epsilon"]

    def update(self, be, param, grad, lr):
        rho, eps, w = self.decay, self.epsilon, param.value
        s, d = self.state(be, param, "sq_avg"), self.state(be, param, "delta")
        u = self.state(be, param, "delta_sq_avg")
        be.execute_multi([(s, rho * s + (1.0 - rho) * be.square(grad)),
                          (d, be.sqrt(u + eps) / be.sqrt(s + eps) * grad),
                          (u, rho * u + (1.0 - rho) * be.square(d)),
                          (w, w - lr * d)])

    def _config(self):
        return {"decay": self.decay, "epsilon": self.epsilon}
