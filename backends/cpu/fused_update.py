"""The CPU backend's fused optimizer step: every parameter of an optimizer group updated by one
C call per dtype over the parameter arena (:mod:`.arena`, ``kernels/cpu/fused_optim.c``).

An optimizer declares its fused form by returning a ``FusedForm``
(``neonlite/optimizers/fused_form.py``) from ``fused_form(lr)``: the rule (a key of
:data:`RULES`), its constants and its state keys; :class:`FusedPlan` runs it.  A call the
kernel cannot take (a dtype without C kernels, bfloat16 states of float64 parameters) answers
False, and the optimizer updates per parameter.
"""
import numpy as np

#: the rules of ``kernels/cpu/fused_optim.h``, by the name a ``FusedForm`` gives
RULES = {"sgd": 0, "momentum": 1, "nesterov": 2, "adam": 3, "adam_bf16": 4, "rmsprop": 5,
         "adagrad": 6}
_SCALED, _CLIPPED, _SEG_DECAY, _SEG_WDECAY = 1, 2, 1, 2
_NORM_PIECE = 1 << 16


class _DtypePlan:
    """The C module, buffers and segment tables of one dtype of an optimizer group."""

    def __init__(self, module, arena, dtype, slots, flags):
        ffi = module.ffi
        self.module, self.dtype = module, dtype
        self.w = ffi.from_buffer("real[]", arena.values[dtype])
        self.g = ffi.from_buffer("real[]", arena.grads[dtype])
        runs = _runs(slots, flags)
        plain = _runs(slots, [0] * len(slots))
        #: decay in use -> (segment table, count); without decay the flags are ignored and
        #: the table has the fewest segments
        self.tables = {True: self._table(ffi, runs), False: self._table(ffi, plain)}
        pieces = [(o + a, min(_NORM_PIECE, n - a)) for o, n, _ in runs
                  for a in range(0, n, _NORM_PIECE)]
        self.npieces = len(pieces)
        self.pieces = ffi.new("nl_segment[]", [{"offset": o, "size": n, "flags": 0}
                                               for o, n in pieces])
        self.piece_sums = np.zeros(len(pieces))
        self.piece_out = ffi.from_buffer("double[]", self.piece_sums)
        self.rule = ffi.new("nl_fused_rule *")
        self.states = (ffi.NULL,) * 4

    @staticmethod
    def _table(ffi, runs):
        return ffi.new("nl_segment[]", [{"offset": o, "size": n, "flags": f}
                                        for o, n, f in runs]), len(runs)

    def sum_squares(self):
        self.module.lib.segment_sum_squares(self.g, self.pieces, self.npieces, self.piece_out)
        return float(self.piece_sums.sum())


class FusedPlan:
    """One optimizer group's fused step over ``arena`` (made once per parameter list)."""

    def __init__(self, optimizer, arena, params):
        self.arena, self.params = arena, list(params)
        self.ok = arena is not None and arena.holds(params)
        #: whether the last :meth:`run` wrote only finite values (weights and states)
        self.finite = False
        self.dtypes = {}
        self.state_refs = None
        if not self.ok:
            return
        by_dtype = {}
        for p in self.params:
            slot = arena.slot(p)
            flag = _SEG_DECAY | _SEG_WDECAY if optimizer.decays(p) else 0
            by_dtype.setdefault(slot.dtype, ([], []))
            by_dtype[slot.dtype][0].append(slot)
            by_dtype[slot.dtype][1].append(flag)
        for dtype, (slots, flags) in by_dtype.items():
            module = arena.be.kernels.module("fused_optim", dtype)
            if module is None:
                self.ok = False
                return
            self.dtypes[dtype] = _DtypePlan(module, arena, dtype, slots, flags)

    def sum_squares(self):
        """Squared global L2 norm of the group's gradients (one pass per dtype)."""
        return sum(plan.sum_squares() for plan in self.dtypes.values())

    def _bind_states(self, form):
        """Every parameter's states of ``form`` as arena views; the kernel's state pointers."""
        arena = self.arena
        refs = []
        for p in self.params:
            for key in form.states:
                refs.append((p, key, arena.state(p, key, form.storage)))
        self.state_refs = (form.states, form.storage, refs)
        for dtype, plan in self.dtypes.items():
            ffi = plan.module.ffi
            bufs = [ffi.from_buffer("real[]" if form.storage is None else "uint16_t[]",
                                    arena.state_buffer(key, dtype, form.storage))
                    for key in form.states]
            bufs += [ffi.NULL] * (2 - len(bufs))
            plan.states = tuple(bufs) + (ffi.NULL, ffi.NULL) if form.storage is None \
                else (ffi.NULL, ffi.NULL) + tuple(bufs)

    def run(self, optimizer, form, scale, clip_value, lr):
        """Apply ``form`` with gradient scale ``scale`` (1.0: none) and clipping by value
        ``clip_value`` (None: none).  False when the kernel cannot take it (nothing done).
        Sets ``finite``: every weight and state value the kernel wrote is finite."""
        if form.storage is not None and any(dt != np.float32 for dt in self.dtypes):
            return False
        refs = self.state_refs
        if refs is None or refs[0] != form.states or refs[1] != form.storage or \
                not all(p.states.get(k) is t for p, k, t in refs[2]):
            self._bind_states(form)
        rule_id = RULES[form.rule]
        flags = (_SCALED if scale != 1.0 else 0) | (_CLIPPED if clip_value is not None else 0)
        self.finite = True
        for plan in self.dtypes.values():
            rule = plan.rule
            rule.rule, rule.flags, rule.scale = rule_id, flags, scale
            if clip_value is not None:
                rule.clip_low, rule.clip_high = -clip_value, clip_value
            rule.decay_mul = 1.0 if form.decay_mul is None else form.decay_mul
            rule.wdecay = form.wdecay
            rule.c = list(form.consts) + [0.0] * (8 - len(form.consts))
            segs, nseg = plan.tables[form.decay_mul is not None or form.wdecay != 0.0]
            status = plan.module.lib.fused_update(rule, segs, nseg, plan.w, plan.g,
                                                  *plan.states)
            if status < 0:
                raise RuntimeError(f"fused optimizer kernel: unknown rule {form.rule!r}")
            self.finite = self.finite and status == 0
        return True


def _runs(slots, flags):
    """[offset, padded size, flags] runs of the slots in arena order, neighbours with equal
    flags merged (the alignment padding between them is zero and stays zero)."""
    runs = []
    for slot, flag in sorted(zip(slots, flags), key=lambda sf: sf[0].offset):
        if runs and runs[-1][2] == flag and runs[-1][0] + runs[-1][1] == slot.offset:
            runs[-1][1] += slot.padded
        else:
            runs.append([slot.offset, slot.padded, flag])
    return runs
