"""The project rule "no allocation inside the training loop after the first step", on the CPU
backend with its C kernels: a transformer block (its MLP runs ``gelu_bprop`` with the fc1 bias
gradient, the C block sums; its layer norms sum over rows too), a batch norm and an Affine head
with a bias (its gradient a GEMM of a ones row made once) train a first step, which makes
every buffer; the next steps allocate nothing of size (and so does a bf16 CNN's).

numpy reports its array allocations to ``tracemalloc``, so the traced peak over the later steps
bounds what they allocate, even what they free again before the step ends (the C kernels'
work arrays are numpy arrays the backend keeps, so a new one would count).  What C code
allocates is not seen there; the kernels that once called malloc now take work arrays from
``KernelModules.workspaces``, whose entries must be the same objects after the later steps.
"""

import numpy as np
import pytest
from support.checks import PEAK_LIMIT, allocation_peaks as _peaks
from support.harness import make_backend
from support.table_kernels import run_kernel

from neonlite import Model
from neonlite.backends.cpu.optree import OpTreeMachine
from neonlite.backends.reference.optree import evaluate
from neonlite.backends.shared.bfloat16 import is_bf16
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, BatchNorm, Conv, GeneralizedCost, Pooling, TransformerBlock
from neonlite.optimizers import Adam
from neonlite.transforms import CrossEntropyMulti, Softmax

T, D_MODEL, CLASSES = 8, 32, 8192
# The head's bias gradient (CLASSES float32, 32 KiB) is the largest per-step buffer these
# kernels once allocated; what a step allocates besides (Python objects: op-trees, argument
# lists) peaks near 10 KiB.
def _kernels_or_skip(be):
    if not be.kernels.active(np.float32 if is_bf16(be.dtype) else be.dtype):
        pytest.skip(f"the C kernels are unavailable: {be.kernels.unavailable_reason()}")
    return be.kernels


def _transformer_with_head(be):
    """(model, x, t, optimizer): x (4, T, D_MODEL) -> TransformerBlock -> BatchNorm ->
    Affine(CLASSES) + softmax, cross-entropy against one-hot targets (4, T, CLASSES), Adam;
    initialized."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(be.bsz, T, D_MODEL)).astype(np.float32)
    Y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, size=(be.bsz, T))]
    data = ArrayIterator(X, Y, shuffle=False)
    model = Model([TransformerBlock(D_MODEL, 2, mlp_ratio=4, name="block"),
                   BatchNorm(name="bn"), Affine(CLASSES, activation=Softmax(), name="head")])
    model.initialize(data, GeneralizedCost(CrossEntropyMulti()))
    x, t = next(iter(data))
    return model, x, t, Adam(learning_rate=1e-3)


def test_training_steps_after_the_first_allocate_nothing():
    be = make_backend("cpu", batch_size=4, seed=0)
    kernels = _kernels_or_skip(be)
    model, x, t, optimizer = _transformer_with_head(be)
    model.train_step(x, t, optimizer, 0)  # the first step makes the buffers
    work = dict(kernels.workspaces)
    assert any(key[0] == "gelu_bprop" for key in work), \
        "gelu_bprop's bias-gradient sums take their work array from kernels.workspaces"
    assert {key[2] for key in work if key[0] == "norm"} == {D_MODEL}, \
        "the layer and batch norms' sums take their work array from kernels.workspaces"

    peaks = _peaks(lambda: np.isfinite(model.train_step(x, t, optimizer, 0)))
    assert max(peaks) < PEAK_LIMIT, (
        f"steps after the first allocated up to {peaks} bytes at once (limit {PEAK_LIMIT})")
    assert kernels.workspaces.keys() == work.keys()
    assert all(kernels.workspaces[key] is buf for key, buf in work.items()), \
        "the C kernels' work arrays are made once"


def test_steps_over_the_parameter_arena_allocate_nothing():
    """The same model trained on int32 class-index targets by the fused optimizer step over its
    parameter arena (AdamW with decay groups, a schedule and global-norm clipping): the
    parameters, gradients and states are views of the arena's buffers, which later steps
    neither replace nor add to, and those steps allocate nothing of size."""
    from neonlite.optimizers import AdamW, CosineSchedule
    be = make_backend("cpu", batch_size=4, seed=0)
    _kernels_or_skip(be)
    model, x, onehot, _ = _transformer_with_head(be)
    t = be.array(onehot.get().argmax(-1), dtype=np.int32)
    optimizer = AdamW(1e-3, weight_decay=0.1, decay_exclude=["1d"], gradient_clip_norm=1.0,
                      schedule=CosineSchedule(100, 10))
    arena = model.arena
    assert arena is not None
    model.train_step(x, t, optimizer, 0)  # the first step makes the states
    f32 = np.dtype(np.float32)
    owners = {"value": arena.values[f32], "grad": arena.grads[f32],
              "m": arena.states[("m", f32, f32)], "v": arena.states[("v", f32, f32)]}
    assert len(arena.states) == 2
    for p in model.parameters():
        for what, tensor in (("value", p.value), ("grad", p.grad), ("m", p.states["m"]),
                             ("v", p.states["v"])):
            assert np.shares_memory(tensor._ary, owners[what]), (p.name, what)
    peaks = _peaks(lambda: np.isfinite(model.train_step(x, t, optimizer, 0)))
    assert max(peaks) < PEAK_LIMIT, (
        f"steps after the first allocated up to {peaks} bytes at once (limit {PEAK_LIMIT})")
    assert arena.values[f32] is owners["value"] and arena.grads[f32] is owners["grad"]
    assert len(arena.states) == 2 and arena.states[("m", f32, f32)] is owners["m"]
    assert all(p.states["m"]._ary.base is not None for p in model.parameters())


#: what ``MixedPrecision`` makes per parameter and step besides (two small Python stand-ins,
#: ``_MasterParameter`` and its ``_Float32States``, about 90 bytes together): nothing of size
MIXED_PRECISION_PER_PARAMETER = 256


@pytest.fixture(params=["chosen here", "compute, emulated AMX"])
def bf16_path(request, monkeypatch):
    """The bf16 path of the products and convolutions: the one chosen on this machine, or the
    compute path (``NEONLITE_BF16=compute``) on the AMX kernel's code with its tile
    instructions emulated in C (``gemm_bf16_amx_emulated``: every CPU)."""
    if request.param == "compute, emulated AMX":
        from neonlite.backends.cpu import bf16 as bf16_ops
        from neonlite.backends.cpu import bf16_choice
        emulated = make_backend("cpu", batch_size=1).kernels.variant("gemm_bf16_amx_emulated")
        for where in (bf16_ops, bf16_choice):
            monkeypatch.setattr(where, "gemm_module", lambda modules: (emulated, "emulated"))
        monkeypatch.setattr(bf16_choice, "gemm_variant", lambda: ("gemm_bf16_amx", "emulated"))
        monkeypatch.setenv("NEONLITE_BF16", "compute")
    return request.param


def test_bf16_training_steps_after_the_first_allocate_nothing(bf16_path):
    """The same model on bfloat16 tensors with float32 master weights (``MixedPrecision``):
    the bf16 boundary's work tensors and bit buffers (``backends/cpu/bf16_boundary.py``),
    made by the first step for each op, operand and shape, are the same objects after the
    next steps, which allocate nothing of size (the limit plus mixed precision's per-parameter
    stand-ins); the products ran through the boundary's float32 work tensors, or, where the
    storage path multiplies on MKL's packed GEMM, through calls kept from the first step with
    no work tensor."""
    from neonlite.optimizers.mixed_precision import MixedPrecision
    be = make_backend("cpu", batch_size=4, seed=0, dtype="bf16")
    _kernels_or_skip(be)
    model, x, t, optimizer = _transformer_with_head(be)
    optimizer = MixedPrecision(optimizer, loss_scale=None)
    assert x.storage == "bf16" and model.arena is None
    model.train_step(x, t, optimizer, 0)
    assert (be.bf16_path("gemm") == "compute") == (bf16_path != "chosen here")
    holders = be.bf16_boundary.holders()
    work = {key: buf for holder in holders for key, buf in holder.items()}
    packed = be.bf16_path("gemm") == "storage" and be.storage_packed_gemm() is not None
    kept = [key for key in be._gemm_calls._table if key[0] == "bf16 packed"]
    assert any(key[0] == ("compound_dot", "C") for key in work) != packed
    assert bool(kept) == packed
    peaks = _peaks(lambda: np.isfinite(model.train_step(x, t, optimizer, 0)))
    limit = PEAK_LIMIT + MIXED_PRECISION_PER_PARAMETER * len(model.parameters())
    assert max(peaks) < limit, (
        f"bf16 steps after the first allocated up to {peaks} bytes at once (limit {limit})")
    now = {key: buf for holder in holders for key, buf in holder.items()}
    assert now.keys() == work.keys() and all(now[key] is buf for key, buf in work.items()), \
        "the boundary's work tensors are made once"
    assert [key for key in be._gemm_calls._table if key[0] == "bf16 packed"] == kept


def test_bf16_cnn_training_steps_after_the_first_allocate_nothing(bf16_path):
    """A LeNet-style CNN on bfloat16 tensors (its convolutions' direct passes, or on the
    compute path every pass on the bf16 GEMM, max pooling and batch norm read and write bf16
    in their kernels, from work arrays their plans and the backend keep): the steps after the
    first allocate nothing of size, and the boundary keeps no work tensor for those passes."""
    from neonlite.initializers import Kaiming
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.optimizers.mixed_precision import MixedPrecision
    from neonlite.transforms import Rectlin
    be = make_backend("cpu", batch_size=4, seed=0, dtype="bf16")
    _kernels_or_skip(be)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(4, 12, 12, 1)).astype(np.float32),
                         np.eye(10, dtype=np.float32)[rng.integers(0, 10, 4)], shuffle=False)
    model = Model([Conv((5, 5, 16), padding=2, init=Kaiming(), activation=Rectlin()),
                   Pooling(2, strides=2),
                   Conv((3, 3, 32), padding=1, init=Kaiming(), activation=Rectlin(),
                        batch_norm=True),
                   Pooling(2, strides=2), Affine(10, activation=Softmax())])
    model.initialize(data, GeneralizedCost(CrossEntropyMulti()))
    x, t = next(iter(data))
    optimizer = MixedPrecision(GradientDescentMomentum(0.01, momentum_coef=0.9),
                               loss_scale=None)
    model.train_step(x, t, optimizer, 0)
    assert (be.bf16_conv_compute() is not None) == (bf16_path != "chosen here")
    peaks = _peaks(lambda: np.isfinite(model.train_step(x, t, optimizer, 0)))
    limit = PEAK_LIMIT + MIXED_PRECISION_PER_PARAMETER * len(model.parameters())
    assert max(peaks) < limit, (
        f"bf16 steps after the first allocated up to {peaks} bytes at once (limit {limit})")
    kept = {key[0][0] for holder in be.bf16_boundary.holders() for key in holder}
    assert not kept & {"fprop_conv", "bprop_conv", "update_conv", "fprop_pool", "bprop_pool",
                       "batchnorm_fprop", "batchnorm_bprop"}, kept


def test_column_sums_of_one_shape_in_one_tree_keep_their_own_results():
    """The machine keeps each inner sum's result from call to call: two sums of the same shape
    in one tree must still not share one, and a later call must not see an earlier value."""
    be = make_backend("cpu", batch_size=4, seed=0)
    _kernels_or_skip(be)
    machine = OpTreeMachine(be.kernels)
    rng = np.random.default_rng(5)
    a, b, c = (be.array(rng.standard_normal((40, 6))) for _ in range(3))
    bias = be.array(rng.standard_normal((1, 6)))
    for x, y in ((a, b), (b, c), (c, a)):
        tree = bias + be.sum(x, axis=0) * 2.0 - be.sum(y, axis=0)
        out = np.empty((1, 6), np.float32)
        assert machine.run(out, tree)
        np.testing.assert_allclose(out, evaluate(np.empty((1, 6), np.float32), tree),
                                   rtol=1e-6, atol=1e-6)
    assert len(machine._sums) == 2, "one result per reduction of the tree, reused"


def test_gelu_bias_gradient_reuses_its_work_array_across_row_counts():
    """The work array depends on the rows only through their blocks (at most 32): calls with
    40 and 64 rows of the same width share one, and both give the summed gradient."""
    be = make_backend("cpu", batch_size=4, seed=0)
    kernels = _kernels_or_skip(be)
    rng = np.random.default_rng(6)
    for rows in (40, 64, 40):
        x, dy = (rng.standard_normal((rows, 24)).astype(np.float32) for _ in range(2))
        dx, db = np.empty_like(x), np.zeros(24, np.float32)
        assert run_kernel(kernels, "gelu_bprop", x, dy, dx, db, "none")
        np.testing.assert_allclose(db, dx.sum(0), rtol=1e-5, atol=1e-5)
    assert len([key for key in kernels.workspaces if key[0] == "gelu_bprop"]) == 1


def test_embedding_rows_after_the_first_allocate_nothing():
    """The look-up and the gradient of an embedding check and convert the ids (floats holding
    whole numbers, as the data iterators give them) into buffers kept by the backend."""
    be = make_backend("cpu", batch_size=4, seed=0)
    _kernels_or_skip(be)
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 50, size=(64, 64))
    table = be.array(rng.standard_normal((50, 16)))
    ids_t, out, grad = be.array(ids), be.empty((64, 64, 16)), be.zeros((50, 16))

    def step():
        be.take_rows(table, ids_t, out)
        be.scatter_add_rows(grad, ids_t, out)
        return True

    step()
    peaks = _peaks(step)
    # 4096 ids: int64 row numbers alone would be 32 KiB
    assert max(peaks) < 8 << 10, f"the look-ups allocated up to {peaks} bytes at once"
    np.testing.assert_array_equal(out.get(), table.get()[ids])
    want = np.zeros((50, 16))
    np.add.at(want, ids.reshape(-1), table.get()[ids].reshape(-1, 16))
    np.testing.assert_allclose(grad.get(), 4 * want, rtol=1e-5, atol=1e-4)
    bad = ids.astype(np.float32)
    bad[0, 1] = 50.0
    ids_t.set(bad)
    with pytest.raises(IndexError, match=r"id 50 at position \(0, 1\)"):
        be.take_rows(table, ids_t, out)
    bad[0, 1] = 2.5
    ids_t.set(bad)
    with pytest.raises(IndexError, match="whole number"):
        be.scatter_add_rows(grad, ids_t, out)


def test_op_tree_register_blocks_are_kept_and_grow_with_the_threads():
    """The op-tree machine's register blocks (one set per OpenMP thread) are kept from call to
    call, and made bigger only when a call may start more threads."""
    from neonlite.backends.cpu.threads import libgomp, set_cpu_threads
    be = make_backend("cpu", batch_size=4, seed=0)
    _kernels_or_skip(be)
    if libgomp() is None:
        pytest.skip("no libgomp to set the OpenMP thread count with")
    before = libgomp().omp_get_max_threads()
    machine = OpTreeMachine(be.kernels)
    rng = np.random.default_rng(8)
    a, b = (be.array(rng.standard_normal((300, 400))) for _ in range(2))  # threads start
    tree = a * b - be.sqrt(be.square(a)) * 0.5
    want = evaluate(np.empty((300, 400), np.float32), tree)
    sizes = []
    try:
        for threads in (1, 4, 2, 4):
            set_cpu_threads(threads)
            out = np.empty((300, 400), np.float32)
            assert machine.run(out, tree)
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
            sizes.append(machine._scratch[np.dtype(np.float32)])
    finally:
        set_cpu_threads(before)
    assert sizes[0].size * 4 == sizes[1].size
    assert sizes[1] is sizes[2] is sizes[3]
