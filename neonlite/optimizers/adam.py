"""Adam and AdamW (PyTorch's update rule), with optional bfloat16 moment storage."""
import math

import numpy as np

from .fused_form import FusedForm
from .optimizer import Optimizer
from .options import NON_NEGATIVE, POSITIVE, UNIT_OPEN, Choice, check_options, option_error


class Adam(Optimizer):
    """Adam (Kingma & Ba), step t = 1, 2, ...:

        g = grad + wdecay * w                      (L2 penalty, coupled)
        w = w * (1 - lr * weight_decay)            (decoupled decay: AdamW)
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g^2
        w = w - lr / (1 - beta_1^t) * m / (sqrt(v) / sqrt(1 - beta_2^t) + epsilon)

    ``state_dtype="bf16"`` stores m and v as bfloat16 bit patterns (uint16, round to nearest
    even) and computes in float32: half the optimizer-state memory.  A step is one
    ``execute_multi`` (m, v and w in one pass over memory where the backend fuses it), or one
    fused call over the parameter arena.  ``decay_exclude`` (see :mod:`.optimizer`) leaves
    parameters out of both decays, e.g. ``["1d"]`` for nanoGPT's "decay only matrices".
    """

    OPTIONS = {"beta_1": UNIT_OPEN, "beta_2": UNIT_OPEN, "epsilon": POSITIVE,
               "wdecay": NON_NEGATIVE, "weight_decay": NON_NEGATIVE,
               "state_dtype": Choice("f32", "bf16")}

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, wdecay=0.0,
                 weight_decay=0.0, state_dtype="f32", schedule=None, gradient_clip_norm=None,
                 gradient_clip_value=None, name=None, decay_exclude=()):
        super().__init__(learning_rate, schedule, gradient_clip_norm, gradient_clip_value, name,
                         decay_exclude)
        checked = check_options(self, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                                wdecay=wdecay, weight_decay=weight_decay,
                                state_dtype=state_dtype)
        if checked["weight_decay"] * self.learning_rate >= 1.0:
            raise option_error(self, "weight_decay", weight_decay,
                               f"< 1 / learning_rate = {1.0 / self.learning_rate:g} (each step "
                               f"multiplies the weights by 1 - learning_rate * weight_decay)")
        self.beta_1, self.beta_2 = checked["beta_1"], checked["beta_2"]
        self.epsilon = checked["epsilon"]
        self.wdecay, self.weight_decay = checked["wdecay"], checked["weight_decay"]
        self.state_dtype = state_dtype

    def update(self, be, param, grad, lr):
        t = self.step + 1
        b1, b2 = self.beta_1, self.beta_2
        step_size = lr / (1.0 - b1 ** t)
        root_correction = 1.0 / math.sqrt(1.0 - b2 ** t)
        w = param.value
        decays = self.decays(param)
        decayed = w * (1.0 - lr * self.weight_decay) if self.weight_decay and decays else w
        if self.wdecay and decays:
            grad = grad + self.wdecay * decayed
        if self.state_dtype == "bf16":
            m = self.state(be, param, "m", np.uint16)
            v = self.state(be, param, "v", np.uint16)
            new_m = be.f32_to_bf16(b1 * be.bf16_to_f32(m) + (1.0 - b1) * grad)
            new_v = be.f32_to_bf16(b2 * be.bf16_to_f32(v) + (1.0 - b2) * be.square(grad))
            m_val, v_val = be.bf16_to_f32(m), be.bf16_to_f32(v)
        else:
            m = self.state(be, param, "m")
            v = self.state(be, param, "v")
            new_m = b1 * m + (1.0 - b1) * grad
            new_v = b2 * v + (1.0 - b2) * be.square(grad)
            m_val, v_val = m, v
        new_w = decayed - step_size * m_val / (be.sqrt(v_val) * root_correction + self.epsilon)
        be.execute_multi([(m, new_m), (v, new_v), (w, new_w)])

    def fused_form(self, lr):
        t = self.step + 1
        b1, b2 = self.beta_1, self.beta_2
        consts = (b1, 1.0 - b1, b2, 1.0 - b2, lr / (1.0 - b1 ** t),
                  1.0 / math.sqrt(1.0 - b2 ** t), self.epsilon)
        bf16 = self.state_dtype == "bf16"
        return FusedForm("adam_bf16" if bf16 else "adam", consts, ("m", "v"),
                         np.uint16 if bf16 else None,
                         (1.0 - lr * self.weight_decay) if self.weight_decay else None,
                         self.wdecay)

    def _config(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                "wdecay": self.wdecay, "weight_decay": self.weight_decay,
                "state_dtype": self.state_dtype}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), default weight_decay 0.01."""

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 weight_decay=0.01, **kwargs):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay=weight_decay,
                         **kwargs)
