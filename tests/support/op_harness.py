"""The per-op harness's calls, shared by its test files (``tests/backend/test_op_table.py``,
and ``tests/backend/test_op_table_bf16.py`` for bfloat16 storage): a dispatched row run at its
sample sizes on a backend and by its numpy reference, and a section row's operand case
(``support.operand_cases``) recorded on a backend and run by its reference."""
import inspect

import numpy as np
from support.operand_cases import cases

from neonlite.backends.ops import OPS


def scalars(op):
    return dict(zip((s.name for s in op.scalars), op.sample_scalars()))


def joins(op):
    """With and without the optional inputs and trailing operands, where the row has any."""
    return (False, True) if any(o.trailing or (o.optional and not o.written)
                                for o in op.operands) else (True,)


def plans(be, op):
    """The row's plan operands (``Operand.plan``), made by ``be`` at the sample
    (``Op.sample_plan``)."""
    return {o.name: op.sample_plan(getattr(be, o.plan)) for o in op.operands if o.plan}


def reference(op, arrays, made=None):
    """The row's reference on float64 copies of ``arrays`` (name -> array or None); returns
    the copies, its written operands holding its results."""
    want = {n: None if a is None else a.astype(np.float64) for n, a in arrays.items()}
    made = made or {}
    op.reference(*[made[o.name] if o.plan else want[o.name] for o in op.operands],
                 *op.sample_scalars())
    return want


def run(be, op, arrays, made=None):
    """The backend's method of row ``op`` on tensors holding ``arrays``; their values after."""
    tensors = {n: None if a is None else be.array(a) for n, a in arrays.items()}
    getattr(be, op.name)(**(made or {}), **tensors, **scalars(op))
    return {n: None if t is None else t.get() for n, t in tensors.items()}


def compare(op, got, want, rtol, atol):
    for o in op.operands:
        if o.written and want[o.name] is not None:
            np.testing.assert_allclose(got[o.name], want[o.name], rtol=rtol, atol=atol,
                                       err_msg=f"{op.name}: {o.name}")


def recorded_call(be, case):
    """(bound arguments of the backend method as an ordered dict, their host copies before
    the call) of ``case``'s first call of its op."""
    seen = []
    method = getattr(be, case.op)

    def record(*args, **kwargs):
        bound = inspect.signature(method).bind(*args, **kwargs)
        bound.apply_defaults()
        seen.append((bound.arguments, {n: v.get().copy() for n, v in bound.arguments.items()
                                       if hasattr(v, "get")}))
        return method(*args, **kwargs)
    setattr(be, case.op, record)
    case.call(be, case.build(be, np.random.default_rng(0)))
    return seen[0]


def reference_call(op, arguments, before):
    """Run the row's reference on float64 copies of the call's tensors; returns those it
    takes (by name when it names its parameters as the contract does, else by position)."""
    host = {n: before[n].astype(np.float64) if before[n].dtype.kind == "f" else before[n]
            for n in before}
    values = [host.get(n, v) for n, v in arguments.items()]
    params = list(inspect.signature(op.reference).parameters)
    if set(params) <= set(arguments):
        op.reference(**{p: host.get(p, arguments[p]) for p in params})
        return {n: v for n, v in host.items() if n in params}
    op.reference(*values[:len(params)])
    return {n: v for n, v in host.items() if n in list(arguments)[:len(params)]}


#: cases whose result depends on state a backend keeps in its own form: max pooling's bprop
#: routes the error by the argmax the fprop left in the backend's plan, which the reference's
#: plan buffer does not hold (the pooling tests compare fprop + bprop pairs instead)
STATEFUL = {("bprop_pool", ("max",))}
REFERENCED = [c for c in cases() if not c.optree and OPS[c.op].reference is not None
              and not OPS[c.op].dispatched and (c.op, tuple(c.tags)) not in STATEFUL]
REFERENCED_IDS = [c.op + "".join(f"[{t}]" for t in c.tags) for c in REFERENCED]


def backend_matches_the_reference(be, case, rtol=2e-4, atol=2e-5):
    """``case``'s call on ``be`` against the reference on float64 copies of its operands as
    they were before the call; the written ones within ``rtol`` and ``atol``."""
    arguments, before = recorded_call(be, case)
    want = reference_call(OPS[case.op], arguments, before)
    for name, value in want.items():
        np.testing.assert_allclose(arguments[name].get(), value, rtol=rtol, atol=atol,
                                   err_msg=f"{case.op}: {name}")
