"""The GPU backend's own code (``backends/gpu*.py``: kernel choice, packed argument formats,
grids, work tensors) against the CPU backend, with the device replaced by the host emulator
(``gpu_host_backend``): every kernel launch is compiled from the real ``.cu`` or generated
source and fed the bytes pycuda would send.  Float32 1e-4 (convolution: 1e-4 of the largest
magnitude), bfloat16 3e-2 of it.  This checks the glue and the kernels' logic, not speed, and
is no substitute for the GPU tests in ``test_gpu_backend.py``."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite.backends.gpu.prefetch import prefetched

pytestmark = requires("emulator")


@pytest.fixture
def backends(monkeypatch):
    previous = neonlite.backends._current
    made = {}

    def make(dtype=np.float32):
        gpu = host_gpu_backend(monkeypatch, dtype=dtype)
        cpu = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
        made["gpu"] = gpu
        return gpu, cpu
    yield make
    neonlite.backends._current = previous


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def close(got, want, tol, what=""):
    want = np.asarray(want, np.float64)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0,
                               atol=tol * max(1.0, np.abs(want).max()), err_msg=what)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), ("bf16", 3e-2)])
@pytest.mark.parametrize("shape", [(2, 7, 6, 3, 5, 3, 3, 1, 2, 1), (2, 6, 6, 8, 16, 3, 3, 1, 1, 2),
                                   (2, 5, 5, 4, 8, 1, 1, 0, 1, 1)])
def test_convolution_passes_and_fused_epilogue(backends, shape, dtype, tol):
    N, H, W, C, K, R, S, pad, stride, dil = shape
    gpu, cpu = backends(dtype)
    x, f, b = rand(N, H, W, C, seed=1), rand(R, S, C, K, seed=2) * 0.3, rand(K, seed=3)
    outs = {}
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        plan = be.conv_layer(N, C, H, W, K, R, S, (pad, pad), (stride, stride), (dil, dil))
        tx, tf = be.array(x), be.array(f)
        o = be.zeros(plan.out_shape)
        be.fprop_conv(plan, tx, tf, o)
        e = be.array(np.cos(np.arange(o.size, dtype=np.float32)).reshape(o.shape))
        gi, gf = be.ones(plan.in_shape), be.ones(plan.filter_shape)
        be.bprop_conv(plan, tf, e, gi, beta=0.5)
        be.update_conv(plan, tx, e, gf, beta=1.0)
        outs[name] = [t.get() for t in (o, gi, gf)]
        if name == "gpu":
            assert set(plan.launches) == {(p, gpu.empty((1,)).storage)
                                       for p in ("fprop", "bprop", "update")}
            fused = be.zeros(plan.out_shape)
            be.fprop_conv(plan, tx, tf, fused, bias=be.array(b), relu=True)
            outs["fused"] = fused.get()
    for got, want, what in zip(outs["gpu"], outs["cpu"], ("fprop", "bprop", "update")):
        close(got, want, tol, what)
    ran = " ".join(gpu.device.launches)
    pointwise = R == S == 1 and stride == 1 and pad == 0
    path = "_simt" if dtype is np.float32 else "_tc"
    assert ("nl_conv_fprop" + path in ran) and (("nl_conv_bprop" + path in ran) != pointwise)
    assert "nl_im2col" not in ran
    close(outs["fused"], np.maximum(outs["cpu"][0] + b, 0.0), tol, "bias + relu")


def test_pooling_rows_and_softmax(backends):
    gpu, cpu = backends()
    x = rand(2, 7, 6, 3, seed=4)
    table, ids = rand(11, 6, seed=5), np.array([[3, 0, 3], [10, 3, 7]], dtype=np.int32)
    rows = rand(2, 3, 6, seed=6)
    outs = {}
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        got = []
        for op in ("max", "avg"):
            plan = be.pool_layer(op, 2, 3, 7, 6, 3, 3, (1, 1), (2, 2))
            o, gi = be.zeros(plan.out_shape), be.ones(plan.in_shape)
            be.fprop_pool(plan, be.array(x), o)
            be.bprop_pool(plan, o, gi, beta=1.0)
            got += [o.get(), gi.get()]
        taken, grad = be.zeros((2, 3, 6)), be.zeros((11, 6))
        be.take_rows(be.array(table), be.array(ids, dtype=np.int32), taken)
        be.scatter_add_rows(grad, be.array(ids, dtype=np.int32), be.array(rows))
        sm = be.zeros((6, 5))
        be.softmax(be.array(rand(6, 5, seed=7) * 20), sm)
        outs[name] = got + [taken.get(), grad.get(), sm.get()]
    for got, want in zip(outs["gpu"], outs["cpu"]):
        close(got, want, 1e-5)
    ran = set(gpu.device.launches)
    assert {"nl_pool_fprop_f32", "nl_pool_bprop_f32", "nl_take_rows_f32_i32",
            "nl_scatter_add_rows_f32_i32", "nl_softmax_xent_f32"} <= ran


@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_layernorm_and_cross_entropy(backends, relu):
    gpu, cpu = backends()
    x, g, b = rand(70, 9, seed=8) + 3, rand(1, 9, seed=9), rand(1, 9, seed=10)
    dy = rand(70, 9, seed=11)
    t = np.eye(9, dtype=np.float32)[np.random.default_rng(1).integers(0, 9, 70)]
    outs = {}
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        tx, tg, tb, tdy = (be.array(a) for a in (x, g, b, dy))
        y, xhat, mean, inv = be.zeros((70, 9)), be.zeros((70, 9)), be.zeros((1, 9)), \
            be.zeros((1, 9))
        rm, rv = be.zeros((1, 9)), be.ones((1, 9))
        be.batchnorm_fprop(tx, tg, tb, y, xhat, mean, inv, rm, rv, relu=relu)
        dx, dg, db = be.ones((70, 9)), be.zeros((1, 9)), be.zeros((1, 9))
        be.batchnorm_bprop(tdy, xhat, inv, tg, dx, dg, db, beta_acc=0.5,
                           y=y if relu else None)
        ly, lxhat, linv = be.zeros((70, 9)), be.zeros((70, 9)), be.zeros((70, 1))
        be.layernorm_fprop(tx, tg, tb, ly, lxhat, linv)
        ldx, ldg, ldb = be.zeros((70, 9)), be.ones((1, 9)), be.zeros((1, 9))
        be.layernorm_bprop(tdy, lxhat, linv, tg, ldx, ldg, ldb)
        rdx, rdg, rdb = be.zeros((70, 9)), be.zeros((1, 9)), be.zeros((1, 9))
        be.layernorm_bprop(tdy, lxhat, linv, tg, rdx, rdg, rdb, residual=tx)
        rtot, ry, rxhat, rinv = be.zeros((70, 9)), be.zeros((70, 9)), be.zeros((70, 9)), \
            be.zeros((70, 1))
        be.layernorm_fprop(tx, tg, tb, ry, rxhat, rinv, residual=tdy, total=rtot)
        nty, ntinv = be.zeros((70, 9)), be.zeros((70, 1))  # inference: no xhat
        be.layernorm_fprop(tx, tg, tb, nty, None, ntinv)
        probs, grad = be.zeros((70, 9)), be.zeros((70, 9))
        loss = be.softmax_cross_entropy(tx, be.array(t), probs, grad, 1.0 / 70)
        iy, ixhat = be.zeros((70, 9)), be.zeros((70, 9))
        be.batchnorm_fprop(tx, tg, tb, iy, ixhat, mean, inv, rm, rv, inference=True, relu=relu)
        outs[name] = [a.get() for a in (y, xhat, mean, inv, rm, rv, dx, dg, db, ly, linv, ldx,
                                        ldg, ldb, probs, grad, iy, ixhat, rdx, rdg, rdb,
                                        rtot, ry, rxhat, rinv, nty, ntinv)] + \
            [np.float32(loss)]
    for i, (got, want) in enumerate(zip(outs["gpu"], outs["cpu"])):
        close(got, want, 1e-4, f"output {i}")
    assert {"nl_colsum2_f32", "nl_bn_stats_f32", "nl_bn_apply_f32", "nl_bn_bprop_f32",
            "nl_ln_fprop_f32", "nl_ln_bprop_f32", "nl_softmax_xent_f32"} <= \
        set(gpu.device.launches)


@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_moments_and_apply_match_the_cpu(backends, relu):
    gpu, cpu = backends()
    x, g, b = rand(300, 40, seed=12) + 50, rand(1, 40, seed=13), rand(1, 40, seed=14)
    outs = {}
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        mean, m2 = be.batchnorm_moments(be.array(x))
        inv = 1.0 / np.sqrt(m2 / 300 + 1e-5)
        y, xhat = be.zeros((300, 40)), be.zeros((300, 40))
        be.batchnorm_apply(be.array(x), be.array(g), be.array(b), y, xhat,
                           be.array(mean.reshape(1, 40)), be.array(inv.reshape(1, 40)), relu=relu)
        outs[name] = [mean, m2, y.get(), xhat.get()]
    np.testing.assert_allclose(outs["gpu"][0], outs["cpu"][0], rtol=1e-7)
    np.testing.assert_allclose(outs["gpu"][1], outs["cpu"][1], rtol=1e-4)
    for got, want in zip(outs["gpu"][2:], outs["cpu"][2:]):
        close(got, want, 1e-4)
    assert {"nl_colsum2_f32", "nl_bn_apply_f32"} <= set(gpu.device.launches)


def test_a_training_step_matches_the_cpu_and_prefetch_feeds_it(backends):
    """Conv + batch norm + ReLU, pooling, affine + softmax, 3 SGD steps: same losses; the
    GPU run's batches come through the prefetcher (the backend's copy_async)."""
    from neonlite import Model
    from neonlite.data import ArrayIterator
    from neonlite.initializers import GlorotUniform, Kaiming
    from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax
    rng = np.random.default_rng(0)
    X, y = rng.random((12, 8, 8, 2)).astype(np.float32), rng.integers(0, 3, 12)
    losses = {}
    gpu, cpu = backends()
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        neonlite.backends._current = be
        be.rng = np.random.default_rng(0)
        data = ArrayIterator(X, y, nclass=3, shuffle=False)
        source = prefetched(data, be)
        assert (source is data) == (name == "cpu")
        model = Model([Conv((3, 3, 4), padding=1, init=Kaiming(), batch_norm=True,
                            activation=Rectlin()),
                       Pooling(2, strides=2),
                       Affine(3, init=GlorotUniform(), activation=Softmax())])
        model.initialize(source, GeneralizedCost(CrossEntropyMulti()))
        opt = GradientDescentMomentum(0.1, momentum_coef=0.9)
        losses[name], allocations = [], []
        for xb, tb in source.batches(False):
            losses[name].append(model.train_step(xb, tb, opt, 0))
            allocations.append(getattr(be, "allocations", 0))
        assert allocations == allocations[:1] * 3, f"{name}: allocations {allocations}"
    assert len(losses["gpu"]) == 3
    np.testing.assert_allclose(losses["gpu"], losses["cpu"], rtol=1e-4)


def test_bf16_mixed_precision_residual_step_follows_float32(backends):
    """A residual block (3x3 conv + BN + ReLU, 3x3 conv + BN, 1x1 stride-2 projection) in
    bfloat16 with float32 master weights: the losses of 3 steps follow the float32 CPU run."""
    from neonlite import Model
    from neonlite.data import ArrayIterator
    from neonlite.initializers import GlorotUniform, Kaiming
    from neonlite.layers import Activation, Affine, Conv, GeneralizedCost, MergeSum, Pooling
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.optimizers.mixed_precision import for_datatype
    from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax
    rng = np.random.default_rng(1)
    X, y = rng.random((12, 8, 8, 3)).astype(np.float32), rng.integers(0, 4, 12)
    losses = {}
    gpu, cpu = backends("bf16")
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        neonlite.backends._current = be
        be.rng = np.random.default_rng(0)
        data = ArrayIterator(X, y, nclass=4, shuffle=False)
        main = [Conv((3, 3, 8), strides=2, padding=1, init=Kaiming(), batch_norm=True,
                     activation=Rectlin()),
                Conv((3, 3, 8), padding=1, init=Kaiming(), batch_norm=True)]
        side = [Conv((1, 1, 8), strides=2, init=Kaiming(), batch_norm=True)]
        model = Model([MergeSum([main, side]), Activation(Rectlin()), Pooling(4, op="avg"),
                       Affine(4, init=GlorotUniform(), activation=Softmax())])
        opt = GradientDescentMomentum(0.1, momentum_coef=0.9)
        cost = GeneralizedCost(CrossEntropyMulti())
        if name == "gpu":
            opt = for_datatype(opt, "bf16")
            cost = opt.wrap_cost(cost)
        model.initialize(data, cost)
        losses[name], allocations = [], []
        for xb, tb in data.batches(False):
            losses[name].append(model.train_step(xb, tb, opt, 0))
            allocations.append(getattr(be, "allocations", 0))
        assert allocations == allocations[:1] * 3, f"{name}: allocations {allocations}"
        if name == "gpu":
            masters = [p.states["master"] for p in model.parameters()]
            assert masters and all(m.storage == "f32" for m in masters)
            velocities = [p.states["velocity"] for p in model.parameters()]
            assert all(v.storage == "f32" for v in velocities)
            assert all(p.value.storage == "bf16" for p in model.parameters())
    np.testing.assert_allclose(losses["gpu"], losses["cpu"], rtol=3e-2)
    assert "nl_conv_fprop_tc64x64_bf16_v8" in gpu.device.launches


@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")
def test_f16_dynamic_loss_scaling_skips_overflowing_steps(backends):
    """float16 storage on the emulated GPU backend: a loss scale of 2**20 overflows the float16
    errors, the generated reduction finds the inf/NaN, the steps are skipped and the scale backs
    off until training proceeds with finite parameters."""
    from neonlite import Model
    from neonlite.data import ArrayIterator
    from neonlite.initializers import GlorotUniform
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.optimizers.mixed_precision import MixedPrecision
    from neonlite.transforms import CrossEntropyMulti, Softmax
    gpu, _ = backends(np.float16)
    neonlite.backends._current = gpu
    rng = np.random.default_rng(2)
    data = ArrayIterator(rng.normal(size=(40, 6)).astype(np.float32), rng.integers(0, 3, 40),
                         nclass=3, shuffle=False)
    model = Model([Affine(3, init=GlorotUniform(), activation=Softmax())])
    opt = MixedPrecision(GradientDescentMomentum(0.1), init_scale=2.0 ** 20)
    model.initialize(data, opt.wrap_cost(GeneralizedCost(CrossEntropyMulti())))
    for xb, tb in data.batches(False):
        model.train_step(xb, tb, opt, 0)
    assert opt.skipped_steps >= 4 and opt.step == 10 - opt.skipped_steps > 0
    assert opt.loss_scale <= 2.0 ** 16
    assert all(np.isfinite(p.value.get()).all() for p in model.parameters())


@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
def test_example_dropout_masks_are_the_cpu_masks(backends, dtype):
    """The GPU backend's device-drawn per-example masks equal the CPU backend's host-drawn ones
    (float32 exactly; bfloat16 holds 0 and the scale rounded once)."""
    gpu, cpu = backends(dtype)
    masks = {}
    for name, be in (("gpu", gpu), ("cpu", cpu)):
        m = be.empty((3, 5, 9))
        be.example_dropout_mask(m, 0.75, key=123456789012, step=2, stream=5, first=7,
                                examples=3)
        masks[name] = m.get().astype(np.float64)
    close(masks["gpu"], masks["cpu"], 0 if dtype == np.float32 else 4e-3)
    assert 0.6 < (masks["gpu"] > 0).mean() < 0.9
