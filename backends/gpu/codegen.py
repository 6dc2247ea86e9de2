"""Op-tree -> CUDA C++ source, in pure Python (no pycuda, so it is tested without a GPU).

:func:`plan` turns ``out[:] = tree`` into a :class:`KernelPlan`: the kernel's structural
``key`` (what the generated source depends on), the launch shape and the integer arguments
(sizes and strides) of this particular call.  :meth:`KernelPlan.source` renders the CUDA source
only when a kernel for that key is not built yet.  The GPU backend memoizes compiled kernels by
``(tree.key(), plan.key)``, so an optimizer step whose learning rate changes every call reuses
one kernel: scalars are kernel arguments, never literals.

Supported trees: the elementwise ops of :mod:`optree` with numpy broadcasting, plus at most one
reduction (``sum``/``max``/``min``/``argmax``/``argmin`` over one axis, several axes or all).
The backend evaluates trees with more reductions by computing the inner ones first into
temporaries.  All arithmetic is float32 whatever the storage (float32, float16, bfloat16 bits,
and integer types, which load as their value).

Every operand is a *descriptor*: an object with ``shape``, ``strides`` (in elements, >= 0) and
``storage`` (a code of :data:`STORAGE`).  Three kernel forms:

* ``elementwise``: a grid-stride loop over the output; axes that are contiguous for every
  operand are merged first, so a contiguous update is one flat loop.
* ``row`` reduction (the reduced axes are the innermost): one block of 256 threads per output
  row; phase 1 reduces the row in shared memory, phase 2 evaluates the rest of the tree over
  the output's extent of the reduced axes (one element for ``out = sum(x, axis=-1)``, the whole
  row for ``y * (dy - sum(dy * y, axis=-1))``).
* ``column`` reduction (the reduced axes are outer): blocks of 32 x 8 threads; the 32 threads
  of a warp take 32 neighbouring outputs (coalesced), the 8 rows of the block split the
  reduction.
"""
import hashlib
from dataclasses import dataclass

import numpy as np

from ...kernels.specs import KERNEL_ROOT
from ..optree import BINARY_OPS, REDUCTION_OPS, UNARY_OPS, OpNode, is_scalar

COMMON_HEADER = KERNEL_ROOT / "cuda" / "neonlite_common.cuh"

#: storage code -> (C element type, load template, store template); ``{p}`` pointer, ``{i}``
#: offset, ``{v}`` float value.
STORAGE = {
    "f32": ("float", "{p}[{i}]", "{v}"),
    "f16": ("nl_u16", "nl_f16_to_f32({p}[{i}])", "nl_f32_to_f16({v})"),
    "bf16": ("nl_u16", "nl_bf16_to_f32({p}[{i}])", "(nl_u16)nl_f32_to_bf16({v})"),
    "u16": ("nl_u16", "(float){p}[{i}]", "(nl_u16)(int)({v})"),
    "u8": ("unsigned char", "(float){p}[{i}]", "(unsigned char)(int)({v})"),
    "i8": ("signed char", "(float){p}[{i}]", "(signed char)({v})"),
    "i32": ("int", "(float){p}[{i}]", "(int)({v})"),
    "i64": ("long long", "(float){p}[{i}]", "(long long)({v})"),
}
_NUMPY_CODES = {"float32": "f32", "float16": "f16", "uint16": "u16", "uint8": "u8", "int8": "i8",
                "int32": "i32", "int64": "i64"}

_UNARY = {
    "neg": "(-{a})", "abs": "fabsf({a})", "sqr": "({a} * {a})", "sqrt": "sqrtf({a})",
    "rsqrt": "(1.0f / sqrtf({a}))", "exp": "expf({a})", "log": "logf({a})",
    "tanh": "tanhf({a})", "sig": "nl_sig({a})", "sign": "nl_sign({a})", "erf": "erff({a})",
    "bf16_to_f32": "nl_bf16_to_f32((unsigned int)({a}))",
    "f32_to_bf16": "(float)nl_f32_to_bf16({a})",
}
_BINARY = {
    "add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
    "pow": "powf({a}, {b})", "maximum": "nl_max({a}, {b})", "minimum": "nl_min({a}, {b})",
    "eq": "(({a} == {b}) ? 1.0f : 0.0f)", "ne": "(({a} != {b}) ? 1.0f : 0.0f)",
    "lt": "(({a} < {b}) ? 1.0f : 0.0f)", "le": "(({a} <= {b}) ? 1.0f : 0.0f)",
    "gt": "(({a} > {b}) ? 1.0f : 0.0f)", "ge": "(({a} >= {b}) ? 1.0f : 0.0f)",
}
assert set(_UNARY) == set(UNARY_OPS) and set(_BINARY) == set(BINARY_OPS)

THREADS = 256          # elementwise and row-reduction block size (a power of two)
COLUMN_BLOCK = (32, 8)  # column reductions: outputs per block x reduction rows per block
_INT32_LIMIT = 2 ** 31 - 1


def storage_code(dtype, bf16=False):
    """The :data:`STORAGE` code of numpy ``dtype`` (``bf16``: uint16 bits holding bfloat16)."""
    if bf16:
        return "bf16"
    code = _NUMPY_CODES.get(np.dtype(dtype).name)
    if code is None:
        raise TypeError(f"GPU tensors store {', '.join(sorted(_NUMPY_CODES))} or bfloat16, "
                        f"not {np.dtype(dtype).name}")
    return code


class OpTreeError(ValueError):
    """An op-tree the generator cannot evaluate into the given output; the message says why."""


# ---- the tree as the generator sees it -----------------------------------------------------
@dataclass
class _Node:
    kind: str            # "leaf", "scalar", "op" or "result" (an earlier output's new value)
    shape: tuple
    index: int = 0       # leaf index or scalar slot
    op: str = None
    axes: tuple = None   # reductions: the reduced axes, normalized to the node's input rank
    children: tuple = ()


def _convert(tree, leaves, scalars, results=()):
    """``tree`` as :class:`_Node` s; appends scalar values to ``scalars`` in slot order.
    A tensor that is (by identity) one of ``results``, the outputs of earlier trees of a
    multi-output kernel, becomes a ``result`` node (the latest such output)."""
    if isinstance(tree, OpNode):
        children = tuple(_convert(arg, leaves, scalars, results) for arg in tree.args)
        if tree.op in REDUCTION_OPS:
            shape = children[0].shape
            axes = _normalize_axes(tree, len(shape))
            out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape))
            return _Node("op", out_shape, op=tree.op, axes=axes, children=children)
        try:
            shape = tuple(np.broadcast_shapes(*(c.shape for c in children)))
        except ValueError:
            raise OpTreeError(f"op-tree {tree!r}: operand shapes "
                              f"{[c.shape for c in children]} do not broadcast") from None
        return _Node("op", shape, op=tree.op, children=children)
    if is_scalar(tree):
        scalars.append(float(tree))
        return _Node("scalar", (), index=len(scalars) - 1)
    earlier = [k for k, out in enumerate(results) if out is tree]
    if earlier:
        return _Node("result", tuple(tree.shape), index=earlier[-1])
    index = next(i for i, leaf in enumerate(leaves) if leaf is tree)
    return _Node("leaf", tuple(tree.shape), index=index)


def _normalize_axes(tree, ndim):
    if tree.axis is None:
        return tuple(range(ndim))
    axes = (tree.axis,) if isinstance(tree.axis, (int, np.integer)) else tuple(tree.axis)
    if tree.op in ("argmax", "argmin") and len(axes) != 1:
        raise OpTreeError(f"{tree.op} takes one axis or None, got axis={tree.axis!r}")
    norm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise OpTreeError(f"{tree.op}: axis {a} is out of range for an operand of rank "
                              f"{ndim}")
        norm.append(int(a) % ndim)
    return tuple(sorted(set(norm)))


def _reductions(node):
    if node.kind != "op":
        return []
    found = [r for c in node.children for r in _reductions(c)]
    return found + [node] if node.op in REDUCTION_OPS else found


def count_reductions(tree):
    """How many reduction nodes ``tree`` (an OpNode, tensor or scalar) holds."""
    if not isinstance(tree, OpNode):
        return 0
    return int(tree.op in REDUCTION_OPS) + sum(count_reductions(a) for a in tree.args)


def innermost_reduction(tree):
    """A reduction node of ``tree`` that contains no other reduction (None if there is none)."""
    if not isinstance(tree, OpNode):
        return None
    for arg in tree.args:
        found = innermost_reduction(arg)
        if found is not None:
            return found
    return tree if tree.op in REDUCTION_OPS else None


def tree_shape(tree):
    """The shape ``tree`` evaluates to (reductions keep their axes with length 1)."""
    return _convert(tree, tree.leaves() if isinstance(tree, OpNode) else [tree], []).shape


# ---- layouts: dropping unit axes and merging contiguous ones ------------------------------
def _padded(shape, strides, ndim):
    pad = ndim - len(shape)
    return (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)


def _operand_strides(desc, ndim, extent):
    """``desc``'s strides over an iteration space of ``ndim`` axes, 0 on broadcast axes;
    checks that its shape broadcasts to ``extent``."""
    shape, strides = _padded(desc.shape, desc.strides, ndim)
    out = []
    for s, st, e in zip(shape, strides, extent):
        if s == 1:
            out.append(0)
        elif s == e:
            out.append(int(st))
        else:
            raise OpTreeError(f"an operand of shape {tuple(desc.shape)} does not broadcast "
                              f"to {tuple(extent)}")
    return out


def _merge(axes, sizes_per_use, strides):
    """Merge neighbouring axes of ``axes`` (a list of axis numbers, in order) that every operand
    walks contiguously.  ``sizes_per_use[o]`` is the list of size vectors operand ``o`` is
    iterated with.  Returns the groups of merged axes."""
    groups = []
    for a in axes:
        if groups and groups[-1][-1] == a - 1 and all(
                (st[a - 1] == 0 and st[a] == 0) or st[a - 1] == st[a] * sizes[a]
                for st, uses in zip(strides, sizes_per_use) for sizes in uses):
            groups[-1].append(a)
        else:
            groups.append([a])
    return groups


def _group_sizes(groups, sizes):
    return [int(np.prod([sizes[a] for a in g])) for g in groups]


def _group_strides(groups, strides):
    return [[st[g[-1]] for g in groups] for st in strides]


def _index_type(count, sizes_list, strides):
    reach = max([count] + [sum((s - 1) * st for s, st in zip(sizes, stv))
                           for sizes in sizes_list for stv in strides])
    return "int" if reach <= _INT32_LIMIT else "long long"


@dataclass
class KernelPlan:
    """What one ``out[:] = tree`` launch needs.

    ``key``: everything the source depends on besides ``tree.key()``; ``form``: 'elementwise',
    'row' or 'column'; ``block``/``grid``: the launch shape; ``int_args``: sizes and strides of
    this call; ``scalars``: the tree's scalar values in slot order; ``arg_format``: the
    ``struct`` format of the whole argument list (pointers: out, then the leaves).
    A multi-output plan (:func:`plan_multi`) has ``_roots`` (one tree per output) and
    ``operands``: the descriptors whose pointers follow ``out``, the other outputs first.
    """

    key: tuple
    form: str
    block: tuple
    grid: tuple
    int_args: tuple
    scalars: tuple
    arg_format: str
    nleaves: int
    _root: _Node = None
    _reduction: _Node = None
    _storages: tuple = ()
    _dims: tuple = ()
    _roots: tuple = ()
    operands: tuple = ()

    def source(self):
        """(kernel name, CUDA source) for this plan's key."""
        return _render(self)


def plan(tree, out, max_blocks=65535):
    """Plan ``out[:] = tree``: ``tree`` an OpNode, a leaf descriptor or a scalar; ``out`` a
    descriptor.  The tree must hold at most one reduction (see :func:`innermost_reduction`)."""
    leaves = tree.leaves() if isinstance(tree, OpNode) else ([] if is_scalar(tree) else [tree])
    scalars = []
    root = _convert(tree, leaves, scalars)
    reductions = _reductions(root)
    if len(reductions) > 1:
        raise OpTreeError(f"op-tree {tree!r} holds {len(reductions)} reductions; evaluate the "
                          f"inner ones into temporaries first")
    ndim = max([len(out.shape), len(root.shape)] + [len(l.shape) for l in leaves]
               + [len(r.children[0].shape) for r in reductions])
    extent, _ = _padded(out.shape, out.strides, ndim)
    shape, _ = _padded(root.shape, (), ndim)
    if any(s != 1 and s != e for s, e in zip(shape, extent)):
        raise OpTreeError(f"op-tree {tree!r} of shape {root.shape} cannot be assigned to an "
                          f"output of shape {tuple(out.shape)}")
    storages = (out.storage,) + tuple(l.storage for l in leaves)
    for code in storages:
        if code not in STORAGE:
            raise OpTreeError(f"unknown storage {code!r}; expected one of {sorted(STORAGE)}")
    common = dict(scalars=tuple(scalars), nleaves=len(leaves), _root=root, _storages=storages)
    if not reductions:
        return _plan_elementwise(out, leaves, extent, ndim, max_blocks, common)
    return _plan_reduction(out, leaves, root, reductions[0], extent, ndim, max_blocks, common)


def plan_multi(assignments, max_blocks=65535):
    """Plan ``[(out, tree), ...]`` as one elementwise kernel that evaluates the trees in
    order for each element and stores each into its output; a tree that reads an earlier
    output (the same descriptor object) reads its new value as stored (rounded to the
    output's storage).  The outputs must share one shape; reductions are not allowed (the
    backend runs such assignments one by one).  Pointers: the first output, then
    ``plan.operands`` (the other outputs, then the leaves)."""
    outs = [out for out, _ in assignments]
    extent = tuple(outs[0].shape)
    if any(tuple(o.shape) != extent for o in outs):
        raise OpTreeError(f"the outputs of a multi-output op-tree must share one shape, got "
                          f"{[tuple(o.shape) for o in outs]}")
    operands, scalars, roots = multi_operands(assignments), [], []
    for number, (out, tree) in enumerate(assignments):
        if count_reductions(tree):
            raise OpTreeError(f"op-tree {tree!r} holds a reduction; a multi-output kernel is "
                              f"elementwise")
        root = _convert(tree, operands, scalars, outs[:number])
        if any(a != 1 and a != e for a, e in zip(_padded(root.shape, (), len(extent))[0],
                                                  extent)) or len(root.shape) > len(extent):
            raise OpTreeError(f"op-tree {tree!r} of shape {root.shape} cannot be assigned to "
                              f"an output of shape {extent}")
        roots.append(root)
    storages = tuple(d.storage for d in (outs[0], *operands))
    for code in storages:
        if code not in STORAGE:
            raise OpTreeError(f"unknown storage {code!r}; expected one of {sorted(STORAGE)}")
    ndim = max([len(extent)] + [len(d.shape) for d in operands])
    extent = _padded(extent, (), ndim)[0]
    common = dict(scalars=tuple(scalars), nleaves=len(operands), _root=None, _storages=storages)
    p = _plan_elementwise(outs[0], operands, extent, ndim, max_blocks, common)
    p._roots, p.operands = tuple(roots), tuple(operands)
    p.key = p.key + (("outputs", len(outs)), tuple(_structure(r) for r in roots))
    return p


def multi_operands(assignments):
    """The descriptors whose pointers follow the first output in a multi-output kernel: the
    other outputs, then each tensor the trees read that is not an earlier output, once."""
    outs = [out for out, _ in assignments]
    operands = list(outs[1:])
    for number, (_, tree) in enumerate(assignments):
        for leaf in (tree.leaves() if isinstance(tree, OpNode) else
                     ([] if is_scalar(tree) else [tree])):
            if not any(leaf is o for o in outs[:number]) and not any(leaf is o for o in operands):
                operands.append(leaf)
    return operands


def _structure(node):
    """What a multi-output kernel's source depends on in one tree."""
    if node.kind != "op":
        return (node.kind, node.index)
    return (node.op, node.axes, tuple(_structure(c) for c in node.children))


def _plan_elementwise(out, leaves, extent, ndim, max_blocks, common):
    strides = [_operand_strides(d, ndim, extent) for d in (out, *leaves)]
    axes = [a for a in range(ndim) if extent[a] != 1]
    groups = _merge(axes, [[extent]] * len(strides), strides)
    sizes = _group_sizes(groups, extent) or [1]
    gstrides = [s or [0] for s in _group_strides(groups, strides)]
    count = int(np.prod(sizes))
    idx = _index_type(count, [sizes], gstrides)
    d = len(sizes)
    grid = (max(1, min(-(-count // THREADS), max_blocks)), 1)
    int_args = (count, *sizes, *(s for st in gstrides for s in st))
    fmt = _arg_format(common, idx, 1 + d + d * len(gstrides))
    key = ("elementwise", d, idx, common["_storages"])
    return KernelPlan(key, "elementwise", (THREADS, 1, 1), grid, int_args, arg_format=fmt,
                      _dims=(d,), **common)


def _plan_reduction(out, leaves, root, red, extent, ndim, max_blocks, common):
    rin, _ = _padded(red.children[0].shape, (), ndim)
    reduced = {a + ndim - len(red.children[0].shape) for a in red.axes}
    inner_leaves = {n.index for n in _leaf_nodes(red)}
    outer_leaves = {n.index for n in _leaf_nodes(root, stop=red)}
    # phase-1 extent: the reduction's input over reduced axes, the output elsewhere
    ext1 = tuple(rin[a] if a in reduced else extent[a] for a in range(ndim))
    for k in range(ndim):
        if k not in reduced and rin[k] != 1 and rin[k] != extent[k]:
            raise OpTreeError(f"the reduction's input {red.children[0].shape} does not "
                              f"broadcast to the output {tuple(out.shape)}")
    descs = (out, *leaves)
    strides, uses = [], []
    for o, desc in enumerate(descs):
        in1 = o > 0 and (o - 1) in inner_leaves
        in2 = o == 0 or (o - 1) in outer_leaves
        strides.append(_operand_strides(desc, ndim, ext1 if in1 else extent))
        if in1 and in2:
            _operand_strides(desc, ndim, extent)
        uses.append(([ext1] if in1 else []) + ([extent] if in2 else []))
    n_axes = [a for a in range(ndim) if a not in reduced and extent[a] != 1]
    a_axes = [a for a in range(ndim) if a in reduced and (ext1[a] != 1 or extent[a] != 1)]
    n_groups = _merge(n_axes, [[extent]] * len(descs), strides)
    a_groups = _merge(a_axes, uses, strides)
    n_sizes = _group_sizes(n_groups, extent) or [1]
    a1_sizes = _group_sizes(a_groups, ext1) or [1]
    a2_sizes = _group_sizes(a_groups, extent) or [1]
    n_str = [s or [0] for s in _group_strides(n_groups, strides)]
    a_str = [s or [0] for s in _group_strides(a_groups, strides)]
    outer, inner1, inner2 = (int(np.prod(s)) for s in (n_sizes, a1_sizes, a2_sizes))
    full_strides = [ns + as_ for ns, as_ in zip(n_str, a_str)]
    idx = _index_type(max(outer, inner1, inner2), [n_sizes + a1_sizes, n_sizes + a2_sizes],
                      full_strides)
    last = max(n_axes + a_axes, default=0)
    form = "row" if last in a_axes or not n_axes else "column"
    if form == "row":
        block, grid = (THREADS, 1, 1), (max(1, min(outer, max_blocks)), 1)
    else:
        bx, by = COLUMN_BLOCK
        block, grid = (bx, by, 1), (max(1, min(-(-outer // bx), max_blocks)), 1)
    dn, da = len(n_sizes), len(a1_sizes)
    int_args = (outer, inner1, inner2, *n_sizes, *a1_sizes, *a2_sizes,
                *(s for st in full_strides for s in st))
    fmt = _arg_format(common, idx, 3 + dn + 2 * da + (dn + da) * len(descs))
    phases = (tuple(sorted(inner_leaves)), tuple(sorted(outer_leaves)))
    key = (form, dn, da, idx, common["_storages"], phases)
    return KernelPlan(key, form, block, grid, int_args, arg_format=fmt, _reduction=red,
                      _dims=(dn, da), **common)


def _leaf_nodes(node, stop=None):
    if node is stop:
        return []
    if node.kind == "leaf":
        return [node]
    return [leaf for c in node.children for leaf in _leaf_nodes(c, stop)]


def _arg_format(common, idx, nints):
    return ("P" * (1 + common["nleaves"]) + "f" * len(common["scalars"])
            + ("i" if idx == "int" else "q") * nints)


# ---- rendering ---------------------------------------------------------------------------------
class _Emitter:
    def __init__(self, indent):
        self.lines, self.count, self.indent = [], 0, indent

    def value(self, expr):
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"{self.indent}float {name} = {expr};")
        return name


def _emit(node, em, loaded, reduced_value=None, stop=None):
    """Emit ``node``'s value; returns its C expression (a variable or scalar name)."""
    if node is stop:
        return reduced_value
    if node.kind in ("leaf", "result"):
        return loaded[(node.kind, node.index) if node.kind == "result" else node.index]
    if node.kind == "scalar":
        return f"s{node.index}"
    args = [_emit(c, em, loaded, reduced_value, stop) for c in node.children]
    template = _UNARY.get(node.op) or _BINARY[node.op]
    return em.value(template.format(a=args[0], b=args[-1]))


def _load_lines(indices, storages, offsets, indent):
    lines, names = [], {}
    for i in indices:
        _, load, _ = STORAGE[storages[i + 1]]
        names[i] = f"a{i}"
        lines.append(f"{indent}float a{i} = {load.format(p=f'l{i}', i=offsets[i + 1])};")
    return lines, names


def _decompose(var, sizes, operands, strides_of, offsets, idx, indent, init=None):
    """C lines that split linear index ``var`` over ``sizes`` (C order) and add each axis's
    coordinate times the operand's stride to its offset variable."""
    lines = []
    for o in operands:
        start = "0" if init is None else init[o]
        lines.append(f"{indent}{idx} {offsets[o]} = {start};")
    if len(sizes) == 1:
        for o in operands:
            lines.append(f"{indent}{offsets[o]} += {var} * {strides_of(o, 0)};")
        return lines
    lines.append(f"{indent}{idx} rem_{var} = {var};")
    for k in reversed(range(len(sizes))):
        coord = f"c{k}_{var}"
        if k:
            lines.append(f"{indent}{idx} {coord} = rem_{var} % {sizes[k]}; "
                         f"rem_{var} /= {sizes[k]};")
        else:
            lines.append(f"{indent}{idx} {coord} = rem_{var};")
        for o in operands:
            lines.append(f"{indent}{offsets[o]} += {coord} * {strides_of(o, k)};")
    return lines


def _signature(p, idx, int_names):
    types = [STORAGE[c][0] for c in p._storages]
    written = max(len(p._roots) - 1, 0)
    params = [f"{types[0]}* out"] + [f"{'' if i < written else 'const '}{t}* l{i}"
                                     for i, t in enumerate(types[1:])]
    params += [f"float s{j}" for j in range(len(p.scalars))]
    params += [f"{idx} {n}" for n in int_names]
    return ",\n    ".join(params)


BODY_MARKER = "// ---- generated kernel ----"


def common_header():
    """The shared device helpers, ready to inline (``#pragma once`` removed)."""
    return COMMON_HEADER.read_text().replace("#pragma once\n", "")


def _render(p):
    if p._roots:
        body = _render_multi(p)
    elif p.form == "elementwise":
        body = _render_elementwise(p)
    else:
        body = _render_reduction(p)
    digest = hashlib.sha1((repr(p.key) + body).encode()).hexdigest()[:16]
    name = f"nl_optree_{p.form}_{digest}"
    return name, f"{common_header()}\n{BODY_MARKER}\n{body.replace('KERNEL_NAME', name)}"


def _grid_stride(p, leaves):
    """The parts every elementwise kernel shares: (index type, the decomposition of ``i`` into
    each operand's offset, the load lines of ``leaves`` and their loaded values, the kernel
    text around a body: ``wrap(body)``)."""
    (d,) = p._dims
    idx = p.key[2]
    nops = 1 + p.nleaves
    names = ["n"] + [f"size{k}" for k in range(d)] + [
        f"st{o}_{k}" for o in range(nops) for k in range(d)]
    offsets = ["off_out"] + [f"off{i}" for i in range(p.nleaves)]
    lines = _decompose("i", [f"size{k}" for k in range(d)], range(nops),
                       lambda o, k: f"st{o}_{k}", offsets, idx, _BODY_INDENT)
    loads, loaded = _load_lines(leaves, p._storages, offsets, _BODY_INDENT)

    def wrap(body):
        return f"""
extern "C" __global__ void __launch_bounds__({THREADS}) KERNEL_NAME(
    {_signature(p, idx, names)})
{{
    for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += ({idx})blockDim.x * gridDim.x) {{
{body}
    }}
}}
"""
    return lines + loads, loaded, wrap


_BODY_INDENT = "        "


def _render_elementwise(p):
    head, loaded, wrap = _grid_stride(p, range(p.nleaves))
    em = _Emitter(_BODY_INDENT)
    value = _emit(p._root, em, loaded)
    store = STORAGE[p._storages[0]][2].format(v=value)
    return wrap("\n".join(head + em.lines + [f"{_BODY_INDENT}out[off_out] = {store};"]))


def _leaf_indices(node):
    if node.kind == "leaf":
        return {node.index}
    return set().union(*(_leaf_indices(c) for c in node.children)) if node.children else set()


def _render_multi(p):
    """The elementwise kernel of a multi-output plan: per element, load the leaves the trees
    read, then evaluate each tree, store it, and keep its stored value for later trees."""
    used = sorted(set().union(*(_leaf_indices(r) for r in p._roots)))
    head, loaded, wrap = _grid_stride(p, used)
    ind = _BODY_INDENT
    em = _Emitter(ind)
    for number, root in enumerate(p._roots):
        value = _emit(root, em, loaded)
        ctype, load, store = STORAGE[p._storages[number]]
        target = "out[off_out]" if number == 0 else f"l{number - 1}[off{number - 1}]"
        em.lines.append(f"{ind}const {ctype} r{number} = {store.format(v=value)};")
        em.lines.append(f"{ind}{target} = r{number};")
        loaded[("result", number)] = em.value(load.format(p=f"(&r{number})", i="0"))
    return wrap("\n".join(head + em.lines))


_IDENTITY = {"sum": "0.0f", "max": "-INFINITY", "min": "INFINITY", "argmax": "-INFINITY",
             "argmin": "INFINITY"}


def _combine(op, acc, acc_i, v, v_i, ind):
    if op == "sum":
        return [f"{ind}{acc} += {v};"]
    if op in ("max", "min"):
        return [f"{ind}{acc} = nl_{op}({acc}, {v});"]
    is_max = "true" if op == "argmax" else "false"
    return [f"{ind}if (nl_arg_better({v}, {v_i}, {acc}, {acc_i}, {is_max})) "
            f"{{ {acc} = {v}; {acc_i} = {v_i}; }}"]


def _render_reduction(p):
    dn, da = p._dims
    idx = p.key[3]
    inner_leaves, outer_leaves = p.key[5]
    red = p._reduction
    arg = red.op in ("argmax", "argmin")
    nops = 1 + p.nleaves
    names = ["n_outer", "inner1", "inner2"] + [f"ns{k}" for k in range(dn)] + [
        f"a1s{k}" for k in range(da)] + [f"a2s{k}" for k in range(da)] + [
        f"st{o}_{k}" for o in range(nops) for k in range(dn + da)]
    base = ["b_out"] + [f"b{i}" for i in range(p.nleaves)]
    offs = ["off_out"] + [f"off{i}" for i in range(p.nleaves)]
    inner_ops = [i + 1 for i in inner_leaves]
    outer_ops = [0] + [i + 1 for i in outer_leaves]
    column = p.form == "column"
    ind = "        "
    lines = _decompose("o", [f"ns{k}" for k in range(dn)], range(nops),
                       lambda o, k: f"st{o}_{k}", base, idx, ind)

    ind2 = ind + "    "
    body1 = _decompose("j", [f"a1s{k}" for k in range(da)], inner_ops,
                       lambda o, k: f"st{o}_{dn + k}", offs, idx, ind2,
                       init={o: base[o] for o in inner_ops})
    loads, loaded = _load_lines(inner_leaves, p._storages, offs, ind2)
    em = _Emitter(ind2)
    v = _emit(red.children[0], em, loaded)
    body1 += loads + em.lines + _combine(red.op, "acc", "acc_i", v, "(long long)j", ind2)

    body2 = _decompose("j", [f"a2s{k}" for k in range(da)], outer_ops,
                       lambda o, k: f"st{o}_{dn + k}", offs, idx, ind2,
                       init={o: base[o] for o in outer_ops})
    loads, loaded = _load_lines(outer_leaves, p._storages, offs, ind2)
    em = _Emitter(ind2)
    em.count = 1000
    value = _emit(p._root, em, loaded, reduced_value="r", stop=red)
    store = STORAGE[p._storages[0]][2].format(v=value)
    body2 += loads + em.lines + [f"{ind2}out[off_out] = {store};"]

    if column:
        bx, by = COLUMN_BLOCK
        nthreads = bx * by
        tid_inner, step, slot = "threadIdx.y", str(by), "threadIdx.y * %d + threadIdx.x" % bx
        loop_head = (f"for ({idx} ob = ({idx})blockIdx.x * {bx}; ob < n_outer; "
                     f"ob += ({idx})gridDim.x * {bx})")
        o_def = f"{ind}{idx} o = ob + threadIdx.x;\n{ind}bool valid = o < n_outer;"
        tree_reduce = [f"{ind}for (int s = {by // 2}; s > 0; s >>= 1) {{",
                       f"{ind}    if (threadIdx.y < s) {{",
                       f"{ind}        int t = {slot}, u = t + s * {bx};"]
        result_slot = "threadIdx.x"
        guard = "valid && "
    else:
        nthreads = THREADS
        tid_inner, step, slot = "threadIdx.x", "blockDim.x", "threadIdx.x"
        loop_head = f"for ({idx} o = blockIdx.x; o < n_outer; o += gridDim.x)"
        o_def = f"{ind}const bool valid = true;"
        tree_reduce = [f"{ind}for (int s = {THREADS // 2}; s > 0; s >>= 1) {{",
                       f"{ind}    if (threadIdx.x < s) {{",
                       f"{ind}        int t = threadIdx.x, u = t + s;"]
        result_slot = "0"
        guard = ""
    tree_reduce += [f"{ind}        float x = sv[u];",
                    *(_combine(red.op, "sv[t]", "si[t]", "x", "si[u]", ind + "        ")),
                    f"{ind}    }}", f"{ind}    __syncthreads();", f"{ind}}}"]
    result = f"(float)si[{result_slot}]" if arg else f"sv[{result_slot}]"
    si_decl = f"    __shared__ long long si[{nthreads}];\n" if arg else ""
    acc_i = f"{ind}long long acc_i = 0x7FFFFFFFFFFFFFFFLL;\n" if arg else ""
    store_i = f"{ind}si[{slot}] = acc_i;\n" if arg else ""
    nl = "\n"
    return f"""
extern "C" __global__ void __launch_bounds__({nthreads}) KERNEL_NAME(
    {_signature(p, idx, names)})
{{
    __shared__ float sv[{nthreads}];
{si_decl}    {loop_head} {{
{o_def}
{nl.join(lines)}
{ind}float acc = {_IDENTITY[red.op]};
{acc_i}{ind}if (valid) for ({idx} j = {tid_inner}; j < inner1; j += {step}) {{
{nl.join(body1)}
{ind}}}
{ind}sv[{slot}] = acc;
{store_i}{ind}__syncthreads();
{nl.join(tree_reduce)}
{ind}const float r = {result};
{ind}__syncthreads();
{ind}if ({guard}true) for ({idx} j = {tid_inner}; j < inner2; j += {step}) {{
{nl.join(body2)}
{ind}}}
    }}
}}
"""


def scalar_values(tree):
    """The scalars of ``tree`` in slot order (the order :func:`plan` numbers them)."""
    if isinstance(tree, OpNode):
        return [v for arg in tree.args for v in scalar_values(arg)]
    return [float(tree)] if is_scalar(tree) else []
