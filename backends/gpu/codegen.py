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
``storage`` (a code of :data:`STORAGE`).  The CUDA source itself is written by
:mod:`.codegen_source`.  Three kernel forms:

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
from dataclasses import dataclass

import numpy as np

from ..optree import REDUCTION_OPS, OpNode, is_scalar
from .codegen_source import (_INT32_LIMIT, BODY_MARKER, COLUMN_BLOCK, STORAGE, THREADS,
                             OpTreeError, _Node, common_header, render, storage_code)
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
    What ``codegen_source`` renders from: ``root``, the tree as converted nodes (its
    ``reduction`` node, if any); ``storages``, the storage of ``out`` then of each leaf;
    ``dims``, the collapsed extents ((d,) elementwise, (dn, da) with a reduction).  A
    multi-output plan (:func:`plan_multi`) has ``roots`` (one tree per output) and
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
    root: _Node = None
    reduction: _Node = None
    storages: tuple = ()
    dims: tuple = ()
    roots: tuple = ()
    operands: tuple = ()

    def source(self):
        """(kernel name, CUDA source) for this plan's key."""
        return render(self)


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
    common = dict(scalars=tuple(scalars), nleaves=len(leaves), root=root, storages=storages)
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
    common = dict(scalars=tuple(scalars), nleaves=len(operands), root=None, storages=storages)
    p = _plan_elementwise(outs[0], operands, extent, ndim, max_blocks, common)
    p.roots, p.operands = tuple(roots), tuple(operands)
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
    key = ("elementwise", d, idx, common["storages"])
    return KernelPlan(key, "elementwise", (THREADS, 1, 1), grid, int_args, arg_format=fmt,
                      dims=(d,), **common)


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
    key = (form, dn, da, idx, common["storages"], phases)
    return KernelPlan(key, form, block, grid, int_args, arg_format=fmt, reduction=red,
                      dims=(dn, da), **common)


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


def scalar_values(tree):
    """The scalars of ``tree`` in slot order (the order :func:`plan` numbers them)."""
    if isinstance(tree, OpNode):
        return [v for arg in tree.args for v in scalar_values(arg)]
    return [float(tree)] if is_scalar(tree) else []


__all__ = ["KernelPlan", "OpTreeError", "STORAGE", "BODY_MARKER", "plan", "plan_multi",
           "multi_operands", "count_reductions", "innermost_reduction", "tree_shape",
           "scalar_values", "storage_code", "common_header", "is_scalar"]
