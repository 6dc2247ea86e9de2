"""CUDA source for the op-tree kernel plans of :mod:`.codegen`: the storage types and their
loads and stores, the unary and binary ops, the launch constants, and the rendering of a
:class:`~.codegen.KernelPlan` into one ``extern "C"`` kernel (elementwise, multi-output, row or
column reduction).  ``render(plan)`` returns (kernel name, source)."""
import hashlib
from dataclasses import dataclass

import numpy as np

from ...kernels.specs import KERNEL_ROOT
from ..optree import BINARY_OPS, UNARY_OPS

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
    types = [STORAGE[c][0] for c in p.storages]
    written = max(len(p.roots) - 1, 0)
    params = [f"{types[0]}* out"] + [f"{'' if i < written else 'const '}{t}* l{i}"
                                     for i, t in enumerate(types[1:])]
    params += [f"float s{j}" for j in range(len(p.scalars))]
    params += [f"{idx} {n}" for n in int_names]
    return ",\n    ".join(params)


BODY_MARKER = "// ---- generated kernel ----"


def common_header():
    """The shared device helpers, ready to inline (``#pragma once`` removed)."""
    return COMMON_HEADER.read_text().replace("#pragma once\n", "")


def render(p):
    if p.roots:
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
    (d,) = p.dims
    idx = p.key[2]
    nops = 1 + p.nleaves
    names = ["n"] + [f"size{k}" for k in range(d)] + [
        f"st{o}_{k}" for o in range(nops) for k in range(d)]
    offsets = ["off_out"] + [f"off{i}" for i in range(p.nleaves)]
    lines = _decompose("i", [f"size{k}" for k in range(d)], range(nops),
                       lambda o, k: f"st{o}_{k}", offsets, idx, _BODY_INDENT)
    loads, loaded = _load_lines(leaves, p.storages, offsets, _BODY_INDENT)

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
    value = _emit(p.root, em, loaded)
    store = STORAGE[p.storages[0]][2].format(v=value)
    return wrap("\n".join(head + em.lines + [f"{_BODY_INDENT}out[off_out] = {store};"]))


def _leaf_indices(node):
    if node.kind == "leaf":
        return {node.index}
    return set().union(*(_leaf_indices(c) for c in node.children)) if node.children else set()


def _render_multi(p):
    """The elementwise kernel of a multi-output plan: per element, load the leaves the trees
    read, then evaluate each tree, store it, and keep its stored value for later trees."""
    used = sorted(set().union(*(_leaf_indices(r) for r in p.roots)))
    head, loaded, wrap = _grid_stride(p, used)
    ind = _BODY_INDENT
    em = _Emitter(ind)
    for number, root in enumerate(p.roots):
        value = _emit(root, em, loaded)
        ctype, load, store = STORAGE[p.storages[number]]
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
    dn, da = p.dims
    idx = p.key[3]
    inner_leaves, outer_leaves = p.key[5]
    red = p.reduction
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
    loads, loaded = _load_lines(inner_leaves, p.storages, offs, ind2)
    em = _Emitter(ind2)
    v = _emit(red.children[0], em, loaded)
    body1 += loads + em.lines + _combine(red.op, "acc", "acc_i", v, "(long long)j", ind2)

    body2 = _decompose("j", [f"a2s{k}" for k in range(da)], outer_ops,
                       lambda o, k: f"st{o}_{dn + k}", offs, idx, ind2,
                       init={o: base[o] for o in outer_ops})
    loads, loaded = _load_lines(outer_leaves, p.storages, offs, ind2)
    em = _Emitter(ind2)
    em.count = 1000
    value = _emit(p.root, em, loaded, reduced_value="r", stop=red)
    store = STORAGE[p.storages[0]][2].format(v=value)
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
