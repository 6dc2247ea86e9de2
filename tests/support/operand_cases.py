"""Correct operand sets of the backend ops that reach compiled code (C through cffi on the CPU,
CUDA kernels on the GPU), and the ways to spoil one operand of such a set: for the operand
fuzz test (``tests/backend/test_operand_fuzz.py``).

:func:`cases` lists :class:`Case`\\ s: ``build(be, rng)`` makes the operands of one call
(an ordered dict of name -> tensor; the names are the contract's) and ``call(be, ops)`` runs
the op on them (earlier calls it needs, an fprop before its bprop, run there on fresh
operands of their own); the cases of the ops the op table dispatches are made from their rows.
:func:`spoiled` gives the spoiled variants of one operand.
"""
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from neonlite.backends.ops import OPS
from neonlite.backends.shared.bfloat16 import is_bf16


@dataclass
class Case:
    """One op's correct call (see the module docstring).  ``dtype_free``: operands of any
    element type (ids, masks); ``index_checked``: operands whose ``fewer`` variant makes a
    valid id out of range (the op's IndexError names the id); ``optree``: an op-tree
    assignment, not a backend op (an error naming the tree's shapes; any element type, as
    op-trees cast); ``tags``: a
    variant's label (the algorithm a plan chooses)."""
    op: str
    build: object
    call: object
    dtype_free: tuple = ()
    index_checked: tuple = ()
    optree: bool = False
    tags: tuple = field(default_factory=tuple)


def _ops(**named):
    return OrderedDict(named)


def host_dtype(be):
    """The host type of the backend's tensors' values: float32 for bfloat16 storage (whose
    dtype is uint16 bits: ``astype`` to it would make integers), else its dtype."""
    return np.dtype(np.float32) if is_bf16(be.dtype) else be.dtype


def _host(be, values):
    return np.asarray(values).astype(host_dtype(be))


def _normal(be, rng, *shape):
    return be.array(_host(be, rng.normal(size=shape)))


def _positive(be, rng, *shape):
    return be.array(_host(be, 0.5 + rng.random(size=shape)))


def _conv_cases(name, N, C, H, W, K, R, S, pad):
    def plan(be):
        return be.conv_layer(N, C, H, W, K, R, S, pad=pad)
    P = (H + 2 * pad - R) + 1
    Q = (W + 2 * pad - S) + 1

    def fprop_ops(be, rng):
        return _ops(I=_normal(be, rng, N, H, W, C), F=_normal(be, rng, R, S, C, K),
                    O=be.zeros((N, P, Q, K)), bias=_normal(be, rng, K))

    def bprop_ops(be, rng):
        return _ops(F=_normal(be, rng, R, S, C, K), E=_normal(be, rng, N, P, Q, K),
                    grad_I=be.zeros((N, H, W, C)))

    def update_ops(be, rng):
        return _ops(I=_normal(be, rng, N, H, W, C), E=_normal(be, rng, N, P, Q, K),
                    grad_F=be.zeros((R, S, C, K)))

    def update(be, ops):
        """update_conv after an fprop_conv of the same input (the contract), or of a correct
        one where the input is the spoiled operand (update_conv must refuse it)."""
        p, x = plan(be), ops["I"]
        if tuple(x.shape) != (N, H, W, C) or x.dtype != be.dtype:
            x = be.zeros((N, H, W, C))
        be.fprop_conv(p, x, be.zeros((R, S, C, K)), be.zeros((N, P, Q, K)))
        be.update_conv(p, ops["I"], ops["E"], ops["grad_F"])

    return [
        Case("fprop_conv", fprop_ops,
             lambda be, o: be.fprop_conv(plan(be), o["I"], o["F"], o["O"], o["bias"], True),
             tags=(name,)),
        Case("bprop_conv", bprop_ops,
             lambda be, o: be.bprop_conv(plan(be), o["F"], o["E"], o["grad_I"]), tags=(name,)),
        Case("update_conv", update_ops, update, tags=(name,)),
    ]


def _pool_cases(kind):
    N, C, H, W = 2, 3, 4, 4

    def plan(be):
        return be.pool_layer(kind, N, C, H, W, 2, 2)

    def bprop(be, ops):
        p = plan(be)
        be.fprop_pool(p, be.ones((N, H, W, C)), be.zeros((N, 2, 2, C)))
        be.bprop_pool(p, ops["E"], ops["grad_I"])

    return [
        Case("fprop_pool", lambda be, rng: _ops(I=_normal(be, rng, N, H, W, C),
                                               O=be.zeros((N, 2, 2, C))),
             lambda be, o: be.fprop_pool(plan(be), o["I"], o["O"]), tags=(kind,)),
        Case("bprop_pool", lambda be, rng: _ops(E=_normal(be, rng, N, 2, 2, C),
                                               grad_I=be.zeros((N, H, W, C))), bprop,
             tags=(kind,)),
    ]


def _recurrent_cases():
    """The whole-sequence passes (the table makes the gate steps' cases)."""
    N, H = 3, 5
    T = 3

    def seq_fprop(be, rng):
        return _ops(gates=_normal(be, rng, T, N, 4 * H), hg=be.zeros((N, 4 * H)),
                    U=_normal(be, rng, H, 4 * H), c=be.zeros((T + 1, N, H)),
                    h=be.zeros((T + 1, N, H)))

    def seq_bprop(be, rng):
        return _ops(gates=_positive(be, rng, T, N, 4 * H), U=_normal(be, rng, H, 4 * H),
                    c=_normal(be, rng, T + 1, N, H), dy=_normal(be, rng, T, N, H),
                    dh=_normal(be, rng, N, H), dc=_normal(be, rng, N, H),
                    dgates=be.zeros((T, N, 4 * H)))

    def rnn_seq_fprop(be, rng):
        return _ops(xg=_normal(be, rng, T, N, H), hg=be.zeros((N, H)), U=_normal(be, rng, H, H),
                    h=be.zeros((T + 1, N, H)))

    def rnn_seq_bprop(be, rng):
        return _ops(h=_normal(be, rng, T + 1, N, H), U=_normal(be, rng, H, H),
                    dy=_normal(be, rng, T, N, H), dh=_normal(be, rng, N, H),
                    dpre=be.zeros((T, N, H)))

    def gru_seq_fprop(be, rng):
        return _ops(gates=_normal(be, rng, T, N, 3 * H), hg=be.zeros((N, 3 * H)),
                    U=_normal(be, rng, H, 3 * H), bias_h=_normal(be, rng, 3 * H),
                    hn=be.zeros((T, N, H)), h=be.zeros((T + 1, N, H)))

    def gru_seq_bprop(be, rng):
        return _ops(gates=_positive(be, rng, T, N, 3 * H), U=_normal(be, rng, H, 3 * H),
                    hn=_normal(be, rng, T, N, H), h=_normal(be, rng, T + 1, N, H),
                    dy=_normal(be, rng, T, N, H), dh=_normal(be, rng, N, H),
                    dgx=be.zeros((T, N, 3 * H)), dgh=be.zeros((T, N, 3 * H)))

    return [
        *(Case(op, build, lambda be, o, op=op: getattr(be, op)(*o.values()))
          for op, build in (("lstm_fprop_sequence", seq_fprop),
                            ("lstm_bprop_sequence", seq_bprop),
                            ("rnn_fprop_sequence", rnn_seq_fprop),
                            ("rnn_bprop_sequence", rnn_seq_bprop),
                            ("gru_fprop_sequence", gru_seq_fprop),
                            ("gru_bprop_sequence", gru_seq_bprop))),
    ]


def _attention_cases():
    N, heads, Tq, Tk, dk, dv = 2, 2, 3, 4, 4, 5
    B = N * heads

    def fprop_ops(be, rng):
        return _ops(q=_normal(be, rng, B, Tq, dk), k=_normal(be, rng, B, Tk, dk),
                    v=_normal(be, rng, B, Tk, dv), out=be.zeros((B, Tq, dv)),
                    lse=be.zeros((B, Tq)),
                    key_mask=be.array(_host(be, [[1, 1, 1, 0], [1, 0, 1, 1]])))

    def bprop_ops(be, rng):
        ops = fprop_ops(be, rng)
        be.attention(*list(ops.values())[:5], 0.5, key_mask=ops["key_mask"], heads=heads)
        ops.update(dout=_normal(be, rng, B, Tq, dv), dq=be.zeros((B, Tq, dk)),
                   dk=be.zeros((B, Tk, dk)), dv=be.zeros((B, Tk, dv)))
        return ops

    def bprop(be, o):
        be.attention_bprop(o["q"], o["k"], o["v"], o["out"], o["lse"], o["dout"], o["dq"],
                           o["dk"], o["dv"], 0.5, key_mask=o["key_mask"], heads=heads)

    return [
        Case("attention", fprop_ops,
             lambda be, o: be.attention(o["q"], o["k"], o["v"], o["out"], o["lse"], 0.5,
                                        key_mask=o["key_mask"], heads=heads),
             dtype_free=("key_mask",)),
        Case("attention_bprop", bprop_ops, bprop, dtype_free=("key_mask",)),
    ]


def _row_kernel_cases():
    M, D = 6, 8

    def table_ops(be, rng):
        return _ops(table=_normal(be, rng, 7, D),
                    ids=be.array(np.array([[0, 6, 2], [2, 1, 0]]), dtype=np.int64),
                    out=be.zeros((2, 3, D)))

    def scatter_ops(be, rng):
        return _ops(grad_table=be.zeros((7, D)),
                    ids=be.array(np.array([[0, 6, 2], [2, 1, 0]]), dtype=np.int64),
                    rows=_normal(be, rng, 2, 3, D))

    def add_row(be, o):
        o["out"][:] = o["x"] + o["row"]

    return [
        Case("softmax_cross_entropy", lambda be, rng: _ops(
            logits=_normal(be, rng, M, D),
            targets=be.array(_host(be, np.eye(D)[rng.integers(0, D, M)])),
            probs=be.zeros((M, D)), grad=be.zeros((M, D))),
            lambda be, o: be.softmax_cross_entropy(*o.values()), dtype_free=("targets",)),
        Case("masked_softmax", lambda be, rng: _ops(
            x=_normal(be, rng, 9, 3, D), out=be.zeros((9, 3, D)),
            key_mask=be.array(_host(be, np.ones((3, D))))),
            lambda be, o: be.masked_softmax(o["x"], o["out"], 0.5, True, o["key_mask"]),
            dtype_free=("key_mask",)),
        Case("take_rows", table_ops, lambda be, o: be.take_rows(*o.values()),
             dtype_free=("ids",), index_checked=("table",)),
        Case("scatter_add_rows", scatter_ops, lambda be, o: be.scatter_add_rows(*o.values()),
             dtype_free=("ids",), index_checked=("grad_table",)),
        Case("permute_axes", lambda be, rng: _ops(x=_normal(be, rng, 2, 3, 4, D),
                                                 out=be.zeros((3, 2, 4, D))),
             lambda be, o: be.permute_axes(o["x"], o["out"], (1, 0, 2, 3)),
             dtype_free=("x", "out")),
        Case("add_row", lambda be, rng: _ops(x=_normal(be, rng, M, D), row=_normal(be, rng, D),
                                            out=be.zeros((M, D))), add_row, optree=True),
    ]


def _table_cases():
    """A case per op the op table dispatches, made from its row: every operand (the optional
    ones given) at the row's sample sizes, a plan operand made by the backend
    (``Op.sample_plan``), a value operand left at its default (None), the sample scalars."""
    found = []
    for op in OPS.values():
        if not op.dispatched:
            continue

        def build(be, rng, op=op):
            arrays = op.sample_operands(rng, host_dtype(be))
            return _ops(**{n: be.array(a) for n, a in arrays.items() if a is not None})

        def call(be, o, op=op):
            plans = {p.name: op.sample_plan(getattr(be, p.plan)) for p in op.operands
                     if p.plan}
            getattr(be, op.name)(**plans, **o, **dict(zip((s.name for s in op.scalars),
                                                          op.sample_scalars())))
        found.append(Case(op.name, build, call,
                          dtype_free=tuple(o.name for o in op.operands if o.mask)))
    return found


def _gemm_cases():
    return [
        Case("compound_dot", lambda be, rng: _ops(A=_normal(be, rng, 5, 3),
                                                 B=_normal(be, rng, 3, 4),
                                                 C=be.zeros((5, 4))),
             lambda be, o: be.compound_dot(o["A"], o["B"], o["C"])),
        Case("batched_dot", lambda be, rng: _ops(A=_normal(be, rng, 3, 5, 3),
                                                B=_normal(be, rng, 3, 3, 4),
                                                C=be.zeros((3, 5, 4))),
             lambda be, o: be.batched_dot(o["A"], o["B"], o["C"])),
    ]


def cases():
    """Every :class:`Case` (see the module docstring)."""
    return (_gemm_cases()
            + _conv_cases("im2col", 2, 3, 5, 5, 4, 3, 3, 1)
            + _conv_cases("direct", 2, 3, 5, 5, 16, 3, 3, 1)
            + _conv_cases("pointwise", 2, 3, 4, 4, 5, 1, 1, 0)
            + _pool_cases("max") + _pool_cases("avg")
            + _recurrent_cases() + _attention_cases()
            + _row_kernel_cases() + _table_cases())


def _resized(shape, more):
    """``shape`` with one more or one fewer element along its first axis longer than 1 (its
    last axis one longer, for ``more``)."""
    shape = list(shape)
    if more:
        shape[-1] += 1
        return tuple(shape)
    axis = next((i for i, n in enumerate(shape) if n > 1), len(shape) - 1)
    shape[axis] = max(shape[axis] - 1, 0)
    return tuple(shape)


def spoiled(be, name, t, case):
    """(kind, spoiled tensor) for operand ``name`` (tensor ``t``) of ``case``: ``fewer`` and
    ``more`` elements; ``float64``, ``float16`` and ``int32`` data (where the dtype is not
    free, and the backend stores the type); a
    ``strided`` view of t's values (same shape, every other element of a wider buffer)."""
    values = t.get()
    out = []
    for kind, more in (("fewer", False), ("more", True)):
        shape = _resized(values.shape, more)
        grown = np.zeros(shape, values.dtype)
        common = tuple(slice(0, min(a, b)) for a, b in zip(shape, values.shape))
        grown[common] = values[common]
        out.append((kind, be.array(grown, dtype=values.dtype)))
    if name not in case.dtype_free and not case.optree and values.dtype.kind == "f":
        for dtype in (np.float64, np.float16, np.int32):
            if np.dtype(dtype) == values.dtype:
                continue
            try:
                out.append((np.dtype(dtype).name, be.array(values.astype(dtype), dtype=dtype)))
            except TypeError:  # a type the backend does not store (float64 on the GPU)
                continue
    wide = np.zeros(values.shape[:-1] + (2 * values.shape[-1],), values.dtype)
    wide[..., ::2] = values
    holder = be.array(wide, dtype=values.dtype)
    index = (slice(None),) * (values.ndim - 1) + (slice(None, None, 2),)
    out.append(("strided", holder[index]))
    return out
