"""What an optimizer's update is, for a backend's fused step over the parameter arena.

An optimizer declares its fused form by returning a :class:`FusedForm` from
``fused_form(lr)``: the rule, its constants (computed by the same Python expressions the
per-parameter update uses, so the CPU's C kernel, which repeats the op-tree's operations in
order, gives bit-identical results) and its state keys.  The backend's arena runs it
(``arena.plan(optimizer, params).run(...)``; see ``backends/storage.py``).  An optimizer whose
``fused_form`` returns None (the base class's default, e.g. one added later) is updated per
parameter, as is every call the arena cannot take.
"""
import math


class FusedForm:
    """What an optimizer's update is, for the fused kernel.

    ``rule``: a rule name of ``kernels/cpu/fused_optim.h`` (``"sgd"``, ``"momentum"``,
    ``"nesterov"``, ``"adam"``, ``"adam_bf16"``, ``"rmsprop"``, ``"adagrad"``); ``consts``: up
    to 8 floats (the rule's c0, c1, ...); ``states``: the state keys in the kernel's order (s0,
    s1; h0, h1 for bfloat16); ``storage``: numpy dtype of the states (None: the parameters');
    ``decay_mul``: w * decay_mul before the update (decoupled decay) or None; ``wdecay``: the
    coupled L2 coefficient or 0."""

    __slots__ = ("rule", "consts", "states", "storage", "decay_mul", "wdecay")

    def __init__(self, rule, consts, states=(), storage=None, decay_mul=None, wdecay=0.0):
        self.rule, self.consts, self.states = rule, tuple(consts), tuple(states)
        self.storage, self.decay_mul, self.wdecay = storage, decay_mul, float(wdecay)


def clip_scale(clip_norm, sum_squares):
    """min(1, clip_norm / (global norm + 1e-6)), as the per-parameter path computes it."""
    return min(1.0, clip_norm / (math.sqrt(sum_squares) + 1e-6))
