"""The operand shapes of the backend ops that hand raw pointers to compiled code (C through
cffi on the CPU, CUDA kernels on the GPU): GEMMs, convolution, pooling, LRN, the recurrent
gate steps and LSTM sequences, the block-sparse ops and the attention gradients.  The kernels
take their sizes from a plan or one operand and trust every other pointer, so each op's
wrapper calls its check here before anything runs (:func:`.operand_sizes.check_operands`:
one ValueError naming the op, the operand, its shape and the shape expected, or a TypeError
for an operand of another element type).  Shared by the CPU and GPU backends."""
import numpy as np

from .blocksparse_plan import BlockSparsePlan
from .operand_sizes import check_operands, check_rank

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
_GATE_ROWS = frozenset(("gates", "dgates", "dgx", "dgh"))


def check_product(op, A, B, C, transA=False, transB=False):
    """``compound_dot``: op(A) (m, k) @ op(B) (k, n) into C (m, n), 2-D; ``batched_dot``: the
    same with C (batch, m, n) and A, B 3-D with a batch of 1 or C's (or 2-D, shared).  m and
    k come from A, n from B; every operand of A's element type."""
    batched = op == "batched_dot"
    check_rank(op, "C", C, 3 if batched else 2)
    for name, t in (("A", A), ("B", B)):
        check_rank(op, name, t, (2, 3) if batched else 2)
        if batched and len(t.shape) == 3 and t.shape[0] not in (1, C.shape[0]):
            raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected a batch of 1 "
                             f"or {C.shape[0]}, C's (C has shape {tuple(C.shape)})")
    a, b = tuple(A.shape), tuple(B.shape)
    m, k = (a[-1], a[-2]) if transA else (a[-2], a[-1])
    n = b[-2] if transB else b[-1]
    check_operands(op, [("B", B, b[:-2] + ((n, k) if transB else (k, n))),
                        ("C", C, tuple(C.shape[:-2]) + (m, n))], like=("A", A), exact=True,
                   note=lambda: f" for A of shape {a}" + (" (transposed)" if transA else "")
                   + f" and B of shape {b}" + (" (transposed)" if transB else ""))


def _conv_shapes(plan):
    N, H, W, C, P, Q, K = (plan.N, plan.H, plan.W, plan.C, plan.P, plan.Q, plan.K)
    image, out = (N, H, W, C), (N, P, Q, K)
    return {"I": image, "grad_I": image, "O": out, "E": out,
            "F": (plan.R, plan.S, C, K), "grad_F": (plan.R, plan.S, C, K), "bias": (K,)}


def _plan_note(plan):
    return f" (the plan: {plan.N}x{plan.H}x{plan.W}x{plan.C} images, {plan.R}x{plan.S} " \
           f"filters, output {plan.N}x{plan.P}x{plan.Q}x{plan.K})"


def check_conv(op, plan, **operands):
    """``fprop_conv`` (I, F, O, bias), ``bprop_conv`` (F, E, grad_I), ``update_conv`` (I, E,
    grad_F): NHWC images of the plan's shape (exactly: the kernels read the batch from the
    first axis), filters (R, S, C, K) and bias (K,) by element count."""
    shapes = _conv_shapes(plan)
    named = list(operands.items())
    check_operands(op, [(n, t, shapes[n]) for n, t in named], like=named[0],
                   exact=("I", "grad_I", "O", "E"), note=lambda: _plan_note(plan))


def check_pool(op, plan, **operands):
    """``fprop_pool`` (I, O), ``bprop_pool`` (E, grad_I): (N, H, W, C) in and (N, P, Q, C)
    out of the plan, exactly."""
    image, out = (plan.N, plan.H, plan.W, plan.C), (plan.N, plan.P, plan.Q, plan.C)
    shapes = {"I": image, "grad_I": image, "O": out, "E": out}
    named = list(operands.items())
    check_operands(op, [(n, t, shapes[n]) for n, t in named], like=named[0], exact=True,
                   note=lambda: f" (the plan pools {image} into {out})")


def check_rows_alike(op, rank, **operands):
    """Every operand of the first one's shape, which has ``rank`` axes (None: any; softmax's
    x and out) (LRN's (M, C) rows x, y, scale, dy, dx: rank 2)."""
    first = next(iter(operands.values()))
    shape, kind = first.shape, first.dtype
    if (rank is None or len(shape) == rank) and kind.kind == "f" and all(
            t.shape == shape and t.dtype == kind for t in operands.values()):
        return
    named = list(operands.items())
    first_name, first = named[0]
    if rank is not None:
        check_rank(op, first_name, first, rank)
    check_operands(op, [(n, t, tuple(first.shape)) for n, t in named[1:]], like=named[0],
                   exact=True, note=lambda: f" (as {first_name}, of shape {tuple(first.shape)})")


def check_masked_softmax(x, out, key_mask):
    """``masked_softmax``: out of x's shape (B, Tq, Tk); key_mask (N, Tk) with B a multiple
    of N (any element type)."""
    check_rank("masked_softmax", "x", x, 3)
    B, _, Tk = x.shape
    if key_mask is not None:
        shape = tuple(key_mask.shape)
        if len(shape) != 2 or shape[1] != Tk or not shape[0] or B % shape[0]:
            raise ValueError(f"masked_softmax: key_mask has shape {shape}; expected (N, {Tk}) "
                             f"with N dividing B = {B} (x has shape {tuple(x.shape)})")
    check_operands("masked_softmax", [("out", out, tuple(x.shape))], like=("x", x), exact=True,
                   note=" (x's)")


#: bfloat16 (8 significant bits) holds every whole number from 0 to this one exactly
BF16_EXACT_IDS = 256


def check_table_rows(op, table, ids, rows):
    """``take_rows`` / ``scatter_add_rows``: the table (V, D) and the rows ids.shape + (D,)
    (by element count), of the table's element type; ids of any shape and number type.
    ``table`` and ``rows`` are (name, tensor) pairs.  bfloat16 ids are refused where the table
    has more rows than bf16 numbers ids exactly (a TypeError: an id above 256 would have been
    rounded when it was stored)."""
    t, r = table[1], rows[1]
    if getattr(ids, "storage", None) == "bf16" and len(t.shape) and \
            t.shape[0] > BF16_EXACT_IDS + 1:
        raise TypeError(f"{op}: ids are bfloat16, which holds whole numbers exactly only up to "
                        f"{BF16_EXACT_IDS}, and {table[0]} has {t.shape[0]} rows: store the ids "
                        f"as int32")
    if len(t.shape) == 2 and r.size == ids.size * t.shape[1] and r.dtype == t.dtype and \
            t.dtype.kind == "f":
        return
    check_rank(op, *table, 2)
    D = table[1].shape[1]
    check_operands(op, [(rows[0], rows[1], tuple(ids.shape) + (D,))], like=table,
                   note=lambda: f" (ids of shape {tuple(ids.shape)}; {table[0]} of shape "
                        f"{tuple(table[1].shape)})")


def check_permute(x, out, axes):
    """``permute_axes``: out.shape[i] == x.shape[axes[i]] (a copy may change the float type)."""
    axes = tuple(int(a) for a in axes)
    if sorted(axes) != list(range(len(x.shape))):
        raise ValueError(f"permute_axes: axes {axes} are not a permutation of x's "
                         f"{len(x.shape)} axes (x has shape {tuple(x.shape)})")
    check_operands("permute_axes", [("out", out, tuple(x.shape[a] for a in axes))],
                   exact=True, note=lambda: f" (x of shape {tuple(x.shape)} permuted by {axes})")


def _gate_shape(name, N, H, G):
    if name in _GATE_ROWS or (name == "hg" and G > 1):
        return (N, G * H)
    return (G * H,) if name == "bias_h" else (N,) if name == "mask" else (N, H)


def check_gate_step(cell, state, op, **operands):
    """One recurrent gate step of ``cell`` (``rnn``, ``lstm``, ``gru``) named ``op`` (the
    leading ``cell`` and ``state`` let an op-table row bind them once): N, H from the
    operand named ``state`` (N, H); the gate rows (``gates``, ``dgates``, ``dgx``, ``dgh``,
    and ``hg`` of the LSTM and GRU) (N, G*H), ``bias_h`` (G*H,), ``mask`` (N,), every other
    operand (N, H), of the state's element type (the mask's is free); by element count (the
    kernels read them flat).  Runs every step of a recurrent layer, so it only compares
    numbers until something differs."""
    first = operands[state]
    if len(first.shape) != 2:
        check_rank(op, state, first, 2)
    N, H = first.shape
    G, kind = GATES[cell], first.dtype
    rows, wide, bias = N * H, N * G * H, G * H
    for name, t in operands.items():
        if t is None:
            continue
        size = wide if name in _GATE_ROWS or (name == "hg" and G > 1) else \
            bias if name == "bias_h" else N if name == "mask" else rows
        if t.size != size or (t.dtype != kind and name != "mask"):
            check_operands(op, [(n, u, _gate_shape(n, N, H, G)) for n, u in operands.items()],
                           like=(state, first), free=("mask",),
                           note=f" (N={N}, H={H} from {state} of shape {(N, H)})")


def check_sequence(op, cell, first, **operands):
    """The whole-sequence passes of ``cell`` (``rnn``, ``lstm``, ``gru``): T, N and G*H from
    the operand named ``first`` (T, N, G*H): gate rows (``gates``, ``xg``, ``dpre``,
    ``dgates``, ``dgx``, ``dgh``) (T, N, G*H), ``hg`` (N, G*H), ``U`` (H, G*H), ``bias_h``
    (G*H,), the states ``c``, ``h`` (T+1, N, H), ``hn`` and ``dy`` (T, N, H), ``dh``, ``dc``
    (N, H) and ``mask`` (T, N)."""
    named = operands[first]
    check_rank(op, first, named, 3)
    T, N, GH = named.shape
    G = GATES[cell]
    if GH % G:
        raise ValueError(f"{op}: {first} has shape {tuple(named.shape)}; expected (T, N, {G}H),"
                         f" a last axis divisible by {G}")
    H = GH // G
    shapes = {"hg": (N, GH), "U": (H, GH), "bias_h": (GH,), "c": (T + 1, N, H),
              "h": (T + 1, N, H), "hn": (T, N, H), "mask": (T, N), "dy": (T, N, H),
              "dh": (N, H), "dc": (N, H)}
    check_operands(op, [(n, t, shapes.get(n, (T, N, GH))) for n, t in operands.items()],
                   like=(first, named), free=("mask",),
                   exact=("c", "h", "hn", "dy", "gates", "xg", "dpre", "dgates", "dgx", "dgh"),
                   note=lambda: f" (T={T}, N={N}, H={H} from {first} of shape {(T, N, GH)})")


def check_blocksparse(op, plan, transposed=False, **operands):
    """The block-sparse ops (shapes in ``backends/backend.py``), exactly: the rows M of the
    weight ops and the batch N of the attention ops from the first operand, the head width d
    from a (sdd) or b (dsd), the layout's R, C, heads, nnz and block size bs from the plan;
    ``transposed``: ``blocksparse_dsd``'s P^T @ b.  A ``plan`` that is no
    :class:`~.blocksparse_plan.BlockSparsePlan` is a TypeError."""
    if not isinstance(plan, BlockSparsePlan):
        raise TypeError(f"{op}: plan must be a block-sparse plan (of blocksparse_layer), got "
                        f"{type(plan).__name__}")
    bs, R, C, nnz, heads = plan.bs, plan.rows, plan.cols, plan.nnz, plan.heads
    named = list(operands.items())
    first_name, first = named[0]
    if op in ("blocksparse_fprop", "blocksparse_bprop", "blocksparse_update"):
        check_rank(op, first_name, first, 2)
        M = first.shape[0]
        shapes = {"x": (M, R * bs), "dx": (M, R * bs), "e": (M, C * bs), "y": (M, C * bs),
                  "w": (nnz, bs, bs), "dw": (nnz, bs, bs)}
        note = lambda: f" (M={M} rows from {first_name} of shape {tuple(first.shape)}; " \
                       f"layout {heads}x{R}x{C} blocks of {bs}, {nnz} stored)"
    else:
        check_rank(op, first_name, first, 4)
        N = first.shape[0]
        blocks = (N, nnz, bs, bs)
        shapes = {"s": blocks, "p": blocks, "dp": blocks, "ds": blocks}
        if op == "blocksparse_sdd":
            d = first.shape[-1]
            shapes.update(a=(N, heads, R * bs, d), b=(N, heads, C * bs, d))
        elif op == "blocksparse_dsd":
            check_rank(op, "b", operands["b"], 4)
            d = operands["b"].shape[-1]
            rows_in, rows_out = (R, C) if transposed else (C, R)
            shapes.update(b=(N, heads, rows_in * bs, d), o=(N, heads, rows_out * bs, d))
        note = lambda: f" (N={N} from {first_name} of shape {tuple(first.shape)}" + (
            f", d={d} from b of shape {tuple(operands['b'].shape)}"
            if op == "blocksparse_dsd" else "") + \
            f"; layout {heads}x{R}x{C} blocks of {bs}, {nnz} stored)"
    check_operands(op, [(n, t, shapes[n]) for n, t in named], like=named[0], exact=True,
                   note=note)


def check_attention(op, q, k, v, out, lse, dout=None, dq=None, dk=None, dv=None,
                    key_mask=None, heads=1, blocks=None, dropout=None):
    """``attention`` (``op``; q, k, v, out, lse) and ``attention_bprop`` (also dout, dq, dk,
    dv): the check of their op-table rows, before any kernel.  Shapes: each operand
    head-major (B, T, d) or token-major (N, T, heads, d) (as (N*heads, T, d)); k (B, Tk, dk),
    v (B, Tk, dv), out (B, Tq, dv) for q (B, Tq, dk); lse (B, Tq); B a multiple of
    ``heads`` (at least 1); key_mask (B // heads, Tk); a block layout ``blocks`` of
    (1 or heads, ceil(Tq / bq), ceil(Tk / bk)) blocks; dout, dq, dk, dv exactly the shapes of
    out, q, k, v (``dropout`` is taken as it is).  Element types: every operand q's, but lse,
    which may also be float32 (the lse of float16 attention).  One ValueError (shapes) or
    TypeError (types) naming the op and the operand."""
    if heads < 1:
        raise ValueError(f"{op}: heads={heads} must be at least 1")
    B, Tq, dk_width = _slice_shape(op, "q", q, heads)
    Tk, dv_width = k.shape[1], v.shape[-1]
    given = f"for q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    want = {"k": (B, Tk, dk_width), "v": (B, Tk, dv_width), "out": (B, Tq, dv_width)}
    for name, t in (("k", k), ("v", v), ("out", out)):
        if _slice_shape(op, name, t, heads) != want[name]:
            raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}, expected "
                             f"{want[name]} (or token-major {want[name][1:2]} x "
                             f"(N, heads) around it) {given}")
    if tuple(lse.shape) != (B, Tq):
        raise ValueError(f"{op}: lse has shape {tuple(lse.shape)}, expected "
                         f"{(B, Tq)} for q {tuple(q.shape)}")
    if B % heads:
        raise ValueError(f"{op}: {B} slices are not a multiple of heads={heads}")
    if key_mask is not None and tuple(key_mask.shape) != (B // heads, Tk):
        raise ValueError(f"{op}: key_mask has shape {tuple(key_mask.shape)}, expected "
                         f"(N, Tk) = {(B // heads, Tk)} {given}")
    if blocks is not None:
        Hl, nqb, nkb = blocks.layout.shape
        want = (-(-Tq // blocks.bq), -(-Tk // blocks.bk))
        if (nqb, nkb) != want or Hl not in (1, heads):
            raise ValueError(f"{op}: the block layout has shape {blocks.layout.shape},"
                             f" expected (1 or {heads}, {want[0]}, {want[1]})")
    gradients = [("dout", dout, tuple(out.shape)), ("dq", dq, tuple(q.shape)),
                 ("dk", dk, tuple(k.shape)), ("dv", dv, tuple(v.shape))]
    check_operands(op, [("k", k, tuple(k.shape)), ("v", v, tuple(v.shape)),
                        ("out", out, tuple(out.shape)), ("lse", lse, tuple(lse.shape))]
                   + [g for g in gradients if g[1] is not None],
                   like=("q", q), exact=("dout", "dq", "dk", "dv"), free=("lse",),
                   note=" (the shape of the forward operand it is the gradient of)")
    if lse.dtype not in (q.dtype, np.float32):
        raise TypeError(f"{op}: lse has dtype {lse.dtype}; expected {q.dtype} (q's) or "
                        f"float32")


def _slice_shape(op, name, t, heads):
    """(B, T, d) of an attention operand: head-major (B, T, d) as it is, token-major
    (N, T, heads, d) as (N*heads, T, d)."""
    shape = tuple(t.shape)
    if len(shape) == 3:
        return shape
    if len(shape) == 4 and shape[2] == heads:
        return shape[0] * heads, shape[1], shape[3]
    raise ValueError(f"{op}: {name} has shape {shape}, expected head-major (B, T, d) or "
                     f"token-major (N, T, heads={heads}, d)")


def example_rows(mask, examples):
    """The rows ``example_dropout_mask`` reads ``mask`` as: ``examples`` (by default its first
    axis), which must divide its element count (ValueError naming the op otherwise)."""
    rows = mask.shape[0] if examples is None else int(examples)
    if rows < 1 or mask.size % rows:
        raise ValueError(f"example_dropout_mask: mask has shape {tuple(mask.shape)} "
                         f"({mask.size} elements); expected whole rows for {rows} examples")
    return rows
