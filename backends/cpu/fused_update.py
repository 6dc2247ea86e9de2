"""The CPU backend's fused optimizer step: every parameter of an optimizer group updated by one
C call per dtype over the parameter arena (:mod:`.arena`, ``kernels/cpu/fused_optim.c``).

An optimizer declares its fused form by returning a ``FusedForm``
(``neonlite/optimizers/fused_form.py``) from ``fused_form(lr)``: the rule (``"adam"`` for
``NL_RULE_ADAM`` of ``kernels/cpu/fused_optim.h``: the rule codes and flags are the header's,
read from the compiled module), its constants and its state keys; :class:`FusedPlan` runs
it.  Where the arena is a master arena linked to bf16 parameters and its link is in a step
(:mod:`.master_link`), the plan reads the bf16 gradients and writes the bf16 copies in the same
pass (``fused_update_linked``).  A call the kernel cannot take (a dtype without C kernels, bfloat16 states of float64
parameters) answers False, and the optimizer updates per parameter.
"""
import numpy as np

_NORM_PIECE = 1 << 16
_RULE = "NL_RULE_"


def rule_code(lib, rule):
    """The code of rule ``rule`` (a ``FusedForm``'s) in ``kernels/cpu/fused_optim.h``
    (``NL_RULE_<RULE>``, from compiled module ``lib``); ValueError naming the known rules."""
    code = getattr(lib, _RULE + rule.upper(), None) if isinstance(rule, str) and \
        rule == rule.lower() else None
    if code is None:
        known = sorted(n[len(_RULE):].lower() for n in dir(lib) if n.startswith(_RULE))
        raise ValueError(f"fused optimizer step: no rule {rule!r} in kernels/cpu/fused_optim.h "
                         f"(its rules: {', '.join(known)})")
    return int(code)


class _DtypePlan:
    """The C module, buffers and segment tables of one dtype of an optimizer group."""

    def __init__(self, module, arena, dtype, slots, decays):
        ffi, lib = module.ffi, module.lib
        flags = [lib.NL_SEG_DECAY | lib.NL_SEG_WDECAY if d else 0 for d in decays]
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
        self._linked = None
        if not self.ok:
            return
        self.decays = [bool(optimizer.decays(p)) for p in self.params]
        by_dtype = {}
        for p in self.params:
            slot = arena.slot(p)
            by_dtype.setdefault(slot.dtype, ([], []))
            by_dtype[slot.dtype][0].append(slot)
            by_dtype[slot.dtype][1].append(bool(optimizer.decays(p)))
        for dtype, (slots, decays) in by_dtype.items():
            module = arena.be.kernels.module("fused_optim", dtype)
            if module is None:
                self.ok = False
                return
            self.dtypes[dtype] = _DtypePlan(module, arena, dtype, slots, decays)

    def sum_squares(self):
        """Squared global L2 norm of the group's gradients (one pass per dtype; the bf16
        gradients where the arena's link is in a step)."""
        link = self._active_link()
        if link is not None:
            return link.sum_squares(*self._link_tables(link)[False])
        return sum(plan.sum_squares() for plan in self.dtypes.values())

    def _active_link(self):
        link = self.arena.link
        return link if link is not None and link.active else None

    def _link_tables(self, link):
        """{decay in use: (nl_link[] of the group, count)}, and the group's ordinals, made once
        per link."""
        if self._linked is None or self._linked[0] is not link:
            flags = [link.module.lib.NL_SEG_DECAY | link.module.lib.NL_SEG_WDECAY if d else 0
                     for d in self.decays]
            self._linked = (link, {True: link.table(self.params, flags),
                                   False: link.table(self.params)},
                            link.ordinals(self.params))
        return self._linked[1]

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
        lib = next(iter(self.dtypes.values())).module.lib
        rule_id = rule_code(lib, form.rule)
        refs = self.state_refs
        if refs is None or refs[0] != form.states or refs[1] != form.storage or \
                not all(p.states.get(k) is t for p, k, t in refs[2]):
            self._bind_states(form)
        flags = (lib.NL_FUSED_SCALED if scale != 1.0 else 0) | \
            (lib.NL_FUSED_CLIPPED if clip_value is not None else 0)
        self.finite = True
        link = self._active_link()
        for plan in self.dtypes.values():
            rule = plan.rule
            rule.rule, rule.flags, rule.scale = rule_id, flags, scale
            if clip_value is not None:
                rule.clip_low, rule.clip_high = -clip_value, clip_value
            rule.decay_mul = 1.0 if form.decay_mul is None else form.decay_mul
            rule.wdecay = form.wdecay
            rule.c = list(form.consts) + [0.0] * (8 - len(form.consts))
            decay = form.decay_mul is not None or form.wdecay != 0.0
            if link is not None:
                links, count = self._link_tables(link)[decay]
                status = plan.module.lib.fused_update_linked(rule, links, count, plan.w,
                                                             *plan.states, link.rounding)
                link.copied(self._linked[2])
            else:
                segs, nseg = plan.tables[decay]
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
