"""RMSProp and Adagrad (each step one pass over memory: state and weights together)."""
from .fused_form import FusedForm
from .optimizer import Optimizer
from .options import POSITIVE, UNIT_OPEN, check_options


class RMSProp(Optimizer):
    """s = decay_rate * s + (1 - decay_rate) * g^2;  w -= lr * g / (sqrt(s) + epsilon)."""

    OPTIONS = {"decay_rate": UNIT_OPEN, "epsilon": POSITIVE}

    def __init__(self, learning_rate=2e-3, decay_rate=0.95, epsilon=1e-6, schedule=None,
                 gradient_clip_norm=None, gradient_clip_value=None, name=None):
        super().__init__(learning_rate, schedule, gradient_clip_norm, gradient_clip_value, name)
        checked = check_options(self, decay_rate=decay_rate, epsilon=epsilon)
        self.decay_rate, self.epsilon = checked["decay_rate"], checked["epsilon"]

    def update(self, be, param, grad, lr):
        s, w = self.state(be, param, "sq_avg"), param.value
        be.execute_multi([(s, self.decay_rate * s + (1.0 - self.decay_rate) * be.square(grad)),
                          (w, w - lr * grad / (be.sqrt(s) + self.epsilon))])

    def fused_form(self, lr):
        return FusedForm("rmsprop", (lr, self.decay_rate, 1.0 - self.decay_rate, self.epsilon),
                         ("sq_avg",))

    def _config(self):
        return {"decay_rate": self.decay_rate, "epsilon": self.epsilon}


class Adagrad(Optimizer):
    """s += g^2;  w -= lr * g / (sqrt(s) + epsilon)."""

    OPTIONS = {"epsilon": POSITIVE}

    def __init__(self, learning_rate=0.01, epsilon=1e-8, schedule=None, gradient_clip_norm=None,
                 gradient_clip_value=None, name=None):
        super().__init__(learning_rate, schedule, gradient_clip_norm, gradient_clip_value, name)
        self.epsilon = check_options(self, epsilon=epsilon)["epsilon"]

    def update(self, be, param, grad, lr):
        s, w = self.state(be, param, "sum_sq"), param.value
        be.execute_multi([(s, s + be.square(grad)),
                          (w, w - lr * grad / (be.sqrt(s) + self.epsilon))])

    def fused_form(self, lr):
        return FusedForm("adagrad", (lr, self.epsilon), ("sum_sq",))

    def _config(self):
        return {"epsilon": self.epsilon}
