"""The per-op harness, driven by the op table (``backends/ops/``), as tinygrad's ``test_ops``
or PyTorch's OpInfo: an op added to the table is tested by adding its row.

For every row: it is an op of the backend contract and every contract op has a row; its cost
is what the profiler uses, and is counted on a real call; the C functions and CUDA kernels it
names exist; a row with a reference that the backends implement in their section files is run
on its operand case (``support.operand_cases``) on the CPU backend against the reference.  For
every row the table dispatches (``kernel`` set): the numpy reference against
the CPU backend's C kernels (float64 and float32, with and without the optional operands),
against the GPU backend over the host emulator, a float64 finite-difference check of the
backward row against the forward one, and the FLOP count's scaling.  The operand fuzz of the
dispatched rows is ``tests/backend/test_operand_fuzz.py``, whose cases for them the table
makes (``support.operand_cases``)."""
import re
from pathlib import Path

import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support import op_harness as harness
from support.op_harness import REFERENCED, REFERENCED_IDS
from support.operand_cases import cases
from support.requires import requires

import neonlite
from neonlite.backends.backend import Backend
from neonlite.backends.gpu.backend import GPUBackend
from neonlite.backends.ops import FAMILIES, OPS, markdown_list
from neonlite.backends.ops.costs import nbytes
from neonlite.backends.ops.dispatch import TableOps
from neonlite.backends.storage import StorageOps
from neonlite.backends.variants import KernelVariants
from neonlite.kernels import specs
from neonlite.profiler.flops import OP_COSTS
from neonlite.profiler.instrument import OP_NAMES

ROOT = specs.KERNEL_ROOT.parent
#: the checkout (the docs are not installed with the package)
CHECKOUT = Path(__file__).resolve().parents[2]
DISPATCHED = [op for op in OPS.values() if op.dispatched]
IDS = [op.name for op in DISPATCHED]
#: public contract methods that are not ops: tensors, op-tree builders, plan makers, control
NOT_OPS = {"empty", "zeros", "ones", "array", "empty_like", "zeros_like", "keep", "assign",
           "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "clip",
           "absolute", "square", "sqrt", "rsqrt", "exp", "log", "tanh", "sig", "sign", "erf",
           "bf16_to_f32", "f32_to_bf16", "sum", "max", "min", "argmax", "argmin", "mean", "var",
           "conv_layer", "pool_layer", "blocksparse_layer", "set_threads", "synchronize",
           "prefetched", "example_rows", "run_op"}
#: the storage and kernel-variant parts of the contract (``backends/storage.py``,
#: ``backends/variants.py``) answer questions about a backend; they are not ops
NOT_OPS |= {name for part in (StorageOps, KernelVariants) for name in vars(part)
            if not name.startswith("_")}


def _contract_methods():
    return {n for n in dir(Backend) if not n.startswith("_") and callable(getattr(Backend, n))}


def test_every_contract_op_has_one_row():
    methods = _contract_methods()
    assert sorted(methods - NOT_OPS - set(OPS)) == [], "contract ops without a row"
    assert sorted(set(OPS) - methods) == [], "rows that are no contract op"
    assert sorted(NOT_OPS & set(OPS)) == []


def test_every_row_has_a_cost_the_profiler_times():
    """``neonlite profile`` times exactly the ops with a cost: a row without one would leave
    the op out of the profile (LRN and the recurrent ops were, before the table)."""
    for op in OPS.values():
        assert callable(op.cost), f"{op.name} has no cost"
        assert OP_COSTS[op.name] is op.cost and op.name in OP_NAMES, op.name


@pytest.mark.parametrize("case", [c for c in cases() if not c.optree],
                         ids=lambda c: c.op + "".join(f"[{t}]" for t in c.tags))
def test_cost_of_a_real_call(case):
    """Each op's cost on the arguments of a real call: bytes at least those of its array
    operands' inputs, FLOPs for every op that computes."""
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    seen = []
    method = getattr(be, case.op)

    def record(*args, **kwargs):
        seen.append((args, kwargs))
        return method(*args, **kwargs)
    setattr(be, case.op, record)
    case.call(be, case.build(be, np.random.default_rng(0)))
    assert seen, f"{case.op}: the case never called it"
    flops, moved = OPS[case.op].cost(*seen[0][0], **seen[0][1])
    assert moved > 0, case.op
    computes = OPS[case.op].family not in ("elementwise",) or case.op.startswith("gelu")
    assert flops > 0 or not computes, case.op


def _header_functions(source):
    text = (ROOT / "kernels" / "cpu" / f"{source}.h").read_text()
    return set(re.findall(r"^\s*(?:void|int64_t|int|double)\s+(\w+)\s*\(", text, re.M))


def test_named_kernels_exist():
    """Every ``source:function`` a row names is declared in ``kernels/cpu/<source>.h``; every
    CUDA ``variant:function`` (``*``: a prefix) is among the variant's functions (``codegen``:
    generated op-tree kernels)."""
    missing = []
    for op in OPS.values():
        for entry in op.c_symbols:
            source, function = entry.split(":")
            if function not in _header_functions(source):
                missing.append(f"{op.name}: {entry}")
        for entry in op.cuda_functions:
            variant, function = entry.split(":")
            if variant == "codegen":
                continue
            names = specs.find(variant).functions
            stem = function.rstrip("*")
            typed = stem if function.endswith("*") else stem + "_"
            if not any(n == stem or n.startswith(typed) for n in names):
                missing.append(f"{op.name}: {entry}")
    assert missing == []


def test_docs_list_every_op_of_the_table():
    """docs/backends.md's op list is the table's (``markdown_list()`` writes it)."""
    text = (CHECKOUT / "docs" / "backends.md").read_text()
    start, end = "<!-- op list: markdown_list() -->\n", "<!-- end of op list -->"
    listed = text[text.index(start) + len(start):text.index(end)]
    assert listed == markdown_list(), "run neonlite.backends.ops.markdown_list() into the docs"
    for family in FAMILIES:
        assert {op.family for op in family.ROWS} == {family.__name__.rsplit(".", 1)[-1]}


# ---- dispatched rows -----------------------------------------------------------------------
@requires("compiler")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("op", DISPATCHED, ids=IDS)
def test_cpu_kernels_match_the_reference(op, dtype):
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=dtype)
    assert be.kernels.module(op.kernel.c_source, np.dtype(dtype)) is not None
    tol = 1e-12 if dtype == np.float64 else 2e-5
    plans = harness.plans(be, op)
    for joined in harness.joins(op):
        arrays = op.sample_operands(np.random.default_rng(1), dtype, joined)
        harness.compare(op, harness.run(be, op, arrays, plans),
                        harness.reference(op, arrays, plans), tol, tol)


def _gpu_matches_the_reference(be, op):
    plans = harness.plans(be, op)
    for joined in harness.joins(op):
        arrays = op.sample_operands(np.random.default_rng(2), np.float32, joined)
        harness.compare(op, harness.run(be, op, arrays, plans),
                        harness.reference(op, arrays, plans), 1e-4, 1e-5)


@requires("emulator")
@pytest.mark.parametrize("op", DISPATCHED, ids=IDS)
def test_gpu_kernels_match_the_reference(monkeypatch, op):
    """The GPU backend's launches of the row (compiled and run on the host emulator)."""
    be = host_gpu_backend(monkeypatch)
    _gpu_matches_the_reference(be, op)
    if op.kernel.arguments == "call":  # entry points named <function>_<shape>_<storage>
        assert all(any(n.startswith(f"{launch.function}_") and n.endswith("_f32")
                       for n in be.device.launches) for launch in op.kernel.launches)
    else:
        assert {f"{launch.function}_f32" for launch in op.kernel.launches} <= \
            set(be.device.launches)


@requires("gpu")
@pytest.mark.parametrize("op", DISPATCHED, ids=IDS)
def test_real_gpu_kernels_match_the_reference(op):
    _gpu_matches_the_reference(neonlite.gen_backend("gpu", batch_size=4, rng_seed=0), op)


def _gradient_pairs(op, back):
    """(backward operand, forward input) pairs: the row's ``gradients``, else every written
    ``d<name>`` of the backward row whose ``<name>`` the forward row reads."""
    if op.gradients:
        return op.gradients
    reads = {o.name for o in op.operands if not o.written or o.updated}
    return tuple((o.name, o.name[1:]) for o in back.operands
                 if o.written and o.name.startswith("d") and o.name[1:] in reads)


@pytest.mark.parametrize("op", [op for op in DISPATCHED if op.backward],
                         ids=[op.name for op in DISPATCHED if op.backward])
def test_backward_row_is_the_gradient_of_the_forward(op):
    """float64 central differences of sum(w * y) (y the forward's ``loss_of`` operand, masks
    given to both rows) against the backward row run with dy (d<loss_of> where it has no dy)
    = w, its other written operands (errors accumulated, such as dh) from 0: each pair of
    ``_gradient_pairs``."""
    back = OPS[op.backward]
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(3)
    inputs = op.sample_operands(rng, np.float64, joined=False)
    inputs.update({o.name: op.sample_operands(rng, np.float64)[o.name]
                   for o in op.operands if o.mask})
    out = harness.run(be, op, inputs)
    w = rng.normal(size=out[op.loss_of].shape)
    incoming = "dy" if any(o.name == "dy" for o in back.operands) else "d" + op.loss_of
    given = {o.name: inputs.get(o.name) if o.mask else None if o.trailing else
             w if o.name == incoming else
             np.zeros(back.sample_shape(o)) if o.written else out[o.name]
             for o in back.operands}
    scalars = {s.name: v for s, v in zip(op.scalars, op.sample_scalars())}
    tensors = {n: None if a is None else be.array(a) for n, a in given.items()}
    getattr(be, back.name)(**tensors, **{s.name: scalars[s.name] for s in back.scalars})
    pairs = _gradient_pairs(op, back)
    for grad, name in pairs:
        numeric = np.zeros_like(inputs[name])
        for i in np.ndindex(*numeric.shape):
            keep = inputs[name][i]
            losses = []
            for step in (1e-6, -1e-6):
                inputs[name][i] = keep + step
                losses.append(float((w * harness.run(be, op, inputs)[op.loss_of]).sum()))
            inputs[name][i] = keep
            numeric[i] = (losses[0] - losses[1]) / 2e-6
        np.testing.assert_allclose(tensors[grad].get(), numeric, rtol=1e-5, atol=1e-7,
                                   err_msg=f"{back.name}: {grad} of {name}")
    assert pairs, f"{back.name} writes no gradient of {op.name}'s inputs"


@pytest.mark.parametrize("op", DISPATCHED, ids=IDS)
def test_flop_count_scales_with_the_rows(op):
    """The cost at the sample sizes, with and without the optional inputs (a gate step's dy
    is None on a sequence's last step): bytes those of the operands, FLOPs twice as many at
    twice the rows (a plan operand made by the CPU backend, a value operand None)."""
    plans = harness.plans(neonlite.gen_backend("cpu", batch_size=4, rng_seed=0), op)

    def cost(M, joined):
        sample = dict(op.sample, M=M)
        arrays = {o.name: plans[o.name] if o.plan else
                  None if o.value or not joined and (o.trailing or (o.optional and not o.written))
                  else np.zeros(tuple(sample[d] if isinstance(d, str) else d for d in o.shape))
                  for o in op.operands}
        args = [arrays[o.name] for o in op.operands if not o.trailing]
        kwargs = {o.name: arrays[o.name] for o in op.operands if o.trailing}
        scalars = [(s, v) for s, v in zip(op.scalars, op.sample_scalars())]
        kwargs.update((s.name, v) for s, v in scalars if s.trailing)
        return (op.cost(*args, *[v for s, v in scalars if not s.trailing], **kwargs),
                list(arrays.values()))
    for joined in harness.joins(op):
        (flops, moved), arrays = cost(op.sample["M"], joined)
        (flops2, _), _ = cost(2 * op.sample["M"], joined)
        assert flops > 0 and flops2 == 2 * flops
        assert moved == nbytes(*arrays)


def test_dispatched_methods_bind_as_python_does():
    """The methods made from rows take their arguments as a written method does: a missing,
    extra or unknown argument is Python's own TypeError naming the op; a residual without its
    total is one ValueError naming the op, before anything is written."""
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    x, y, scale = be.ones((3, 4)), be.zeros((3, 4)), be.zeros((3, 4))
    with pytest.raises(TypeError, match=r"^lrn_fprop\(\) missing 1 required positional "
                                        r"argument: 'k'$"):
        be.lrn_fprop(x, y, scale, 3, 1e-3, 0.75)
    with pytest.raises(TypeError, match=r"^lrn_fprop\(\) takes 8 positional arguments but 9 "
                                        r"were given$"):
        be.lrn_fprop(x, y, scale, 3, 1e-3, 0.75, 2.0, 1)
    with pytest.raises(TypeError, match=r"^lrn_fprop\(\) got an unexpected keyword argument "
                                        r"'kk'$"):
        be.lrn_fprop(x, y, scale, 3, 1e-3, 0.75, 2.0, kk=1)
    with pytest.raises(TypeError, match=r"^lrn_fprop\(\) got multiple values for argument 'x'$"):
        be.lrn_fprop(x, y, scale, 3, 1e-3, 0.75, 2.0, x=x)
    be.lrn_fprop(x, y, scale, depth=3, alpha=1e-3, beta=0.75, k=2.0)
    assert y.get().any()
    g, rstd, out = be.ones((1, 4)), be.zeros((3, 1)), be.zeros((3, 4))
    with pytest.raises(ValueError, match="^rmsnorm_fprop: residual and total are given "
                                         "together or not at all$"):
        be.rmsnorm_fprop(x, g, out, None, rstd, residual=x)
    assert not out.get().any()


@pytest.mark.parametrize("name", ["attention", "attention_bprop"])
def test_rows_run_whole_by_their_section_get_their_method_from_the_row(name):
    """Fused attention is dispatched by the table although its section files choose its
    whole call (``Kernel.arguments == "call"``): both backends' method is the row's (one
    signature, one check, one place), and returns the row's ``returns`` operand."""
    op = OPS[name]
    assert op.dispatched and op.kernel.arguments == "call"
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    assert getattr(type(be), name) is getattr(TableOps, name)
    assert getattr(GPUBackend, name) is getattr(TableOps, name)
    arrays = op.sample_operands(np.random.default_rng(4), np.float64)
    tensors = {n: None if a is None else be.array(a) for n, a in arrays.items()}
    assert getattr(be, name)(**tensors, **harness.scalars(op)) is tensors[op.returns]


def test_a_scalar_given_by_name_must_be_one_of_its_codes():
    """An unknown activation is one ValueError naming the op and the choices, before any
    kernel or reference runs (it was the code table's bare KeyError)."""
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    xg, hg, h_prev, h = be.ones((2, 3)), be.ones((2, 3)), be.ones((2, 3)), be.zeros((2, 3))
    with pytest.raises(ValueError, match="^rnn_fprop_step: activation must be one of 'tanh', "
                                         "'logistic', 'relu', 'identity', got 'swish'$"):
        be.rnn_fprop_step(xg, hg, h_prev, h, None, "swish")
    assert not h.get().any()


# ---- every row with a reference, on the operand cases ------------------------------------
@pytest.mark.parametrize("case", REFERENCED, ids=REFERENCED_IDS)
def test_cpu_backend_matches_the_reference_on_its_case(case):
    """Each row with a reference that the backends implement in their section files: the
    CPU backend's call of the operand case against the reference on float64 copies."""
    harness.backend_matches_the_reference(
        neonlite.gen_backend("cpu", batch_size=4, rng_seed=0), case)


@requires("emulator")
@pytest.mark.parametrize("case", REFERENCED, ids=REFERENCED_IDS)
def test_gpu_backend_matches_the_reference_on_its_case(monkeypatch, case):
    """The same on the GPU backend over the host emulator (its kernels, plans and op-trees)."""
    harness.backend_matches_the_reference(host_gpu_backend(monkeypatch), case)


@requires("gpu")
@pytest.mark.parametrize("case", REFERENCED, ids=REFERENCED_IDS)
def test_real_gpu_backend_matches_the_reference_on_its_case(case):
    harness.backend_matches_the_reference(
        neonlite.gen_backend("gpu", batch_size=4, rng_seed=0), case)


# ---- what a row can say about its kernel --------------------------------------------------
def _toy_row(**kernel):
    from neonlite.backends.ops import Kernel, Op, Operand, Scalar
    return Op("toy", "norm", "toy", lambda *a, **k: (1.0, 1.0),
              operands=(Operand("x", ("M", "D")), Operand("y", ("M", "D"), written=True)),
              scalars=(Scalar("eps", default=1.0), Scalar("axis", "int", default=-1)),
              kernel=Kernel("norm", "toy", **kernel), sample={"M": 2, "D": 3})


def test_kernel_arguments_put_sizes_scalars_and_work_where_the_row_says():
    """``Kernel.arguments`` orders the C call's arguments by name (a scalar may be left out);
    the work array goes where it says ``work``; by default: operands, sizes, scalars."""
    x, y = np.zeros((2, 3)), np.zeros((2, 3))
    plain = _toy_row()
    assert plain.c_arguments(("px", "py"), (2, 3), (1.0, -1)) == ("px", "py", 2, 3, 1.0, -1)
    row = _toy_row(arguments=("y", "x", "work", "sizes", "eps"), work="norm")
    assert row.c_arguments(("px", "py"), row.sizes((x, y)), (1.0, -1), "w") == \
        ("py", "px", "w", 2, 3, 1.0)


def test_a_kernel_chosen_by_a_scalar_takes_that_choices_arguments():
    """``choose_by``/``choices``: the scalar's value picks the C function and its argument
    order (batch norm's training and inference functions); a value without a choice runs the
    reference; a choice by a name that is no scalar is one ValueError."""
    from neonlite.backends.ops import Kernel
    row = _toy_row(choose_by="axis", choices={
        -1: Kernel("norm", "toy_last", arguments=("x", "y", "sizes")),
        0: Kernel("norm", "toy_first", arguments=("y", "x", "eps"))})
    kernel, order = row.c_call((1.0, 0))
    assert kernel.c_symbol == "toy_first" and order(("px", "py", 2, 3, 1.0, 0, None)) == \
        ("py", "px", 1.0)
    assert row.c_call((1.0, -1))[0].c_symbol == "toy_last" and row.c_call((1.0, 5)) is None
    assert row.c_symbols == ("norm:toy_last", "norm:toy_first")
    with pytest.raises(ValueError, match="^op toy: choose_by must name a scalar"):
        _toy_row(choose_by="nope", choices={0: Kernel("norm", "toy")})


@pytest.mark.parametrize("kernel", [dict(arguments=("x", "y", "sizes", "work")),
                                    dict(arguments=("x", "z", "sizes"), work=None),
                                    dict(work="norm")])
def test_kernel_arguments_must_name_the_row(kernel):
    """A name that is no operand or scalar, or ``work`` without a work array (or a work array
    the arguments do not place), is one ValueError when the row is made."""
    with pytest.raises(ValueError, match="^op toy: kernel arguments must name"):
        _toy_row(**kernel)


@requires("compiler")
def test_a_case_the_kernel_does_not_take_runs_the_reference():
    """``Kernel.takes`` False (softmax over another axis than the last): the reference runs,
    with the same result."""
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    x = np.random.default_rng(0).normal(size=(3, 4))
    out = be.zeros((3, 4))
    be.softmax(be.array(x), out, axis=0)
    e = np.exp(x - x.max(axis=0))
    np.testing.assert_allclose(out.get(), e / e.sum(axis=0), rtol=1e-12)
    assert not OPS["softmax"].kernel.takes(x, out.get(), 0)


def test_rows_without_launches_have_a_gpu_section_method():
    """A dispatched row with no CUDA launch is launched by the GPU backend's section file:
    GPUBackend must not fall back to the table-made method (whose ``run_op`` would refuse)."""
    from neonlite.backends.gpu.backend import GPUBackend
    from neonlite.backends.ops.dispatch import TableOps
    for op in DISPATCHED:
        if not op.kernel.launches:
            assert getattr(GPUBackend, op.name) is not getattr(TableOps, op.name), op.name


def test_the_cpu_backend_runs_every_dispatched_row_from_the_table():
    """No CPU section file writes a dispatched row's method a second time: CPUBackend's is
    the one the table made."""
    from neonlite.backends.cpu.backend import CPUBackend
    from neonlite.backends.ops.dispatch import TableOps
    assert [op.name for op in DISPATCHED
            if getattr(CPUBackend, op.name) is not getattr(TableOps, op.name)] == []
