"""The float32 master arena linked to a bf16 model (``MixedPrecision`` on the CPU backend with
``-d bf16``): the masters' fused optimizer step reads each bf16 gradient and writes each bf16
parameter itself, so a step is one pass over memory, as in float32 (``kernels/cpu/
fused_optim.c``, ``fused_update_linked``).

A :class:`MasterLink` holds, per master (in the order ``MixedPrecision`` gives them: that
order is the parameter ordinal of stochastic rounding's key), an ``nl_link``: the master's slot
of the arena and the addresses of its parameter's bf16 value and gradient (contiguous numpy
``uint16`` arrays, kept referenced).  A step is

1. :meth:`MasterLink.begin`: the rounding of the copies (``"nearest"``, or ``"stochastic"``
   keyed by seed and step) and "nothing done yet";
2. the wrapped optimizer's step over the masters: its fused plan over the arena
   (:class:`~.fused_update.FusedPlan`) sees the active link and runs ``fused_update_linked``
   on its group (gradients read as bf16, every copy written and checked finite), marking its
   masters copied; an optimizer that updates per parameter reads a master's ``grad``, which
   first widens every bf16 gradient into the arena's float32 gradients in one call
   (:meth:`MasterLink.widen_grads`);
3. :meth:`MasterLink.finish`: the masters no fused pass copied are rounded into their bf16
   parameters in one call; it answers whether every copy it wrote is finite.

Widening and rounding to nearest are exact functions of the bits, so a linked step updates
the masters bit for bit as the unlinked one (widen, update, copy back) does.
"""
import numpy as np

from .bf16_boundary import is_bf16_tensor

F32 = np.dtype(np.float32)


def link_masters(arena, masters, params):
    """A :class:`MasterLink` of float32 ``masters`` (all in ``arena``, a
    :class:`~.arena.ParameterArena`) to the bf16 ``params`` they stand for, or None where the
    link cannot be made: a parameter or gradient not a contiguous bf16 CPU tensor, masters not
    float32, or no compiled kernels."""
    if set(arena.values) != {F32} or not arena.holds(masters) or len(masters) != len(params):
        return None
    for p in params:
        for t in (p.value, p.grad):
            if not is_bf16_tensor(t) or not t._ary.flags.c_contiguous:
                return None
    module = arena.be.kernels.module("fused_optim", F32)
    return None if module is None else MasterLink(module, arena, masters, params)


class MasterLink:
    """The link of one master arena (see the module docstring); made by :func:`link_masters`."""

    def __init__(self, module, arena, masters, params):
        self.module, self.arena = module, arena
        self.params = list(params)
        self.masters = list(masters)
        #: the bf16 arrays the links point into (kept alive, and compared by :meth:`current`)
        self.arrays = [(p.value._ary, p.grad._ary) for p in self.params]
        #: the per-link sums of :meth:`sum_squares` (made once: a step allocates nothing)
        self.sums = np.zeros(len(self.masters))
        self._sums_out = module.ffi.from_buffer("double[]", self.sums)
        self.ordinal = {id(m): k for k, m in enumerate(self.masters)}
        self.rounding = module.ffi.new("nl_rounding *")
        self.w = module.ffi.from_buffer("real[]", arena.values[F32])
        self.g = module.ffi.from_buffer("real[]", arena.grads[F32])
        self.everything = self.table(self.masters)
        self.active = False
        self._grads_pending = False
        self._copied = np.zeros(len(self.masters), dtype=bool)

    def current(self):
        """True while every parameter still holds the arrays the links point into."""
        return all(p.value._ary is v and p.grad._ary is g
                   for p, (v, g) in zip(self.params, self.arrays))

    def table(self, masters, flags=None):
        """``(nl_link[], count)`` of ``masters`` (of this link), with segment flags ``flags``
        (one per master; default 0)."""
        ffi = self.module.ffi
        entries = []
        for k, master in enumerate(masters):
            ordinal = self.ordinal[id(master)]
            slot = self.arena.slot(master)
            value, grad = self.arrays[ordinal]
            entries.append({"offset": slot.offset, "size": slot.size,
                            "flags": 0 if flags is None else flags[k], "ordinal": ordinal,
                            "g16": ffi.from_buffer("uint16_t[]", grad),
                            "w16": ffi.from_buffer("uint16_t[]", value)})
        return ffi.new("nl_link[]", entries), len(entries)

    def ordinals(self, masters):
        """The ordinals of ``masters`` (an index array)."""
        return np.fromiter((self.ordinal[id(m)] for m in masters), dtype=np.int64,
                           count=len(masters))

    # ---- one step ------------------------------------------------------------------------------
    def begin(self, rounding, seed, step):
        """Start a step whose copies are rounded as ``rounding`` (``"nearest"`` or
        ``"stochastic"``) says;
        stochastic rounding's key is made from ``seed`` and ``step`` (optimizer steps done)."""
        lib = self.module.lib
        self.rounding.mode = lib.NL_ROUND_STOCHASTIC if rounding == "stochastic" else \
            lib.NL_ROUND_NEAREST
        self.rounding.seed = int(seed) % 2 ** 64
        self.rounding.step = int(step) % 2 ** 64
        self._copied[:] = False
        self._grads_pending = True
        self.active = True

    def copied(self, ordinals):
        """Mark the masters of ``ordinals`` copied into their bf16 parameters this step."""
        self._copied[ordinals] = True

    def widen_grads(self):
        """Every bf16 gradient widened into the arena's float32 gradients (one call), once per
        step: for an optimizer that reads ``master.grad`` itself."""
        if self.active and self._grads_pending:
            links, count = self.everything
            self.module.lib.link_widen_grads(links, count, self.g)
            self._grads_pending = False

    def finish(self):
        """End the step: every master not yet copied rounded into its bf16 parameter in one
        call.  True when every copy written here is finite."""
        self.active = False
        if self._copied.all():
            return True
        if not self._copied.any():
            links, count = self.everything
        else:
            links, count = self.table([m for m, done in zip(self.masters, self._copied)
                                       if not done])
        return bool(self.module.lib.link_narrow_values(links, count, self.w, self.rounding))

    def sum_squares(self, links, count):
        """Sum of the squares of the bf16 gradients of table ``links`` (one pass)."""
        self.module.lib.link_sum_squares(links, count, self._sums_out)
        return float(self.sums[:count].sum())
