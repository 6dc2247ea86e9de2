"""The GPU backend against the CPU backend (``harness.compare_with_cpu``), on a real GPU.

Every test here needs a CUDA GPU with pycuda and skips, with the reason, where there is none.
Tolerances: float32 rtol 1e-5 (GEMM and convolution 1e-4: cuBLAS sums in another order);
float16/bfloat16 storage 1e-2 / 2e-2 against the float32 CPU result.
"""
import subprocess
import sys

import numpy as np
import pytest
from support.harness import compare_with_cpu, lenet, make_backend
from support.requires import need

import neonlite
from neonlite.backends import BackendUnavailable, philox

F32 = dict(rtol=1e-5, atol=1e-5)
GEMM = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def gpu():
    need("gpu")


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# ---- op-trees ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 1000003])
def test_elementwise_odd_sizes(n):
    a, b = rand(n, seed=1), np.abs(rand(n, seed=2)) + 0.5

    def op(be, ta, tb):
        out = be.empty((n,))
        out[:] = be.exp(ta * 0.1) / tb + be.sqrt(tb) - be.tanh(ta) * (ta > 0.0) + be.erf(ta)
        return out
    compare_with_cpu(op, a, b, **F32)


@pytest.mark.parametrize("shape", [(1,), (3,), (1000003,), (7, 1), (1, 9), (4, 5, 3), (2, 3, 4, 5)])
def test_reductions_on_every_axis(shape):
    x = rand(*shape, seed=3)
    axes = list(range(len(shape))) + [None] + ([(0, len(shape) - 1)] if len(shape) > 1 else [])
    for axis in axes:
        for fn in ("sum", "max", "min", "mean", "var", "argmax", "argmin"):
            if fn.startswith("arg") and isinstance(axis, tuple):
                continue

            def op(be, tx, fn=fn, axis=axis):
                kept = tuple(1 if axis is None or i in np.atleast_1d(axis) else s
                             for i, s in enumerate(shape))
                out = be.empty(kept)
                out[:] = getattr(be, fn)(tx, axis=axis)
                return out
            tol = dict(rtol=1e-4, atol=1e-3) if x.size > 1000 and fn in ("sum", "mean", "var") \
                else F32
            compare_with_cpu(op, x, **tol)


def test_broadcast_row_and_column_and_reductions_inside_trees():
    x, row, col = rand(6, 5, seed=4), rand(1, 5, seed=5), rand(6, 1, seed=6)

    def op(be, tx, tr, tc):
        out = be.empty((6, 5))
        out[:] = tx * tr + tc
        soft = be.empty((6, 5))
        soft[:] = tr * (tx - be.sum(tx * tr, axis=-1))
        cols = be.empty((1, 5))
        cols[:] = cols * 0.0 + be.sum(tx * tc, axis=0)
        return out, soft, cols
    compare_with_cpu(op, x, row, col, **F32)


def test_non_contiguous_views_in_and_out():
    base = rand(8, 10, 6, seed=7)

    def op(be, tb):
        view = tb[1:7, ::3, 2:5]
        out = be.zeros((8, 10, 6))
        out[::2, 1:5, ::2] = view[:4, :, :] * 2.0 + 1.0
        red = be.empty((6, 1, 3))
        red[:] = be.sum(view, axis=1)
        host = view.get()
        assert host.shape == (6, 4, 3)
        out[7, 9, :] = np.arange(6, dtype=np.float32)
        return out, red, be.array(host)
    compare_with_cpu(op, base, **F32)


def test_in_place_and_transposed_views():
    w, g = rand(3, 4, seed=8), rand(4, 3, seed=9)

    def op(be, tw, tg):
        tw[:] = tw - 0.1 * tg.T / (be.sqrt(tw * tw) + 1.0)
        return tw
    compare_with_cpu(op, w, g, **F32)


def test_one_kernel_per_structure_and_scalars_as_arguments():
    be = make_backend("gpu")
    w, g = be.array(rand(100, seed=10)), be.array(rand(100, seed=11))
    w[:] = w - 0.1 * g
    compiled = be.executor.compiles
    for lr in (0.05, 0.01, 0.001):
        w[:] = w - lr * g
    assert be.executor.compiles == compiled


# ---- GEMM -------------------------------------------------------------------------------------
@pytest.mark.parametrize("transA", [False, True])
@pytest.mark.parametrize("transB", [False, True])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 1.0)])
def test_compound_dot(transA, transB, alpha, beta):
    a = rand(*((37, 29) if transA else (29, 37)), seed=12)
    b = rand(*((13, 37) if transB else (37, 13)), seed=13)
    c = rand(29, 13, seed=14)

    def op(be, ta, tb, tc):
        be.compound_dot(ta, tb, tc, alpha, beta, transA, transB)
        return tc
    compare_with_cpu(op, a, b, c, **GEMM)


def test_gemm_on_views_and_batched():
    a, b = rand(6, 20, 16, seed=15), rand(6, 16, 9, seed=16)

    def op(be, ta, tb):
        c = be.zeros((6, 20, 9))
        be.batched_dot(ta, tb, c)
        d = be.zeros((6, 9, 20))
        be.batched_dot(tb, ta, d, transA=True, transB=True)
        e = be.zeros((10, 9))
        be.compound_dot(ta[0][::2], tb[1], e)
        f = be.zeros((16, 9))
        be.compound_dot(ta[2, 3:19].T, tb[3][:16, :9].T.T, f, alpha=2.0)
        return c, d, e, f
    compare_with_cpu(op, a, b, **GEMM)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 1e-2), ("bf16", 2e-2)])
def test_gemm_16_bit_storage(dtype, tol):
    a, b = rand(64, 48, seed=17) * 0.3, rand(48, 32, seed=18) * 0.3
    be = make_backend("gpu", dtype=dtype)
    c = be.zeros((64, 32))
    be.compound_dot(be.array(a), be.array(b), c)
    np.testing.assert_allclose(c.get().astype(np.float32), a @ b, rtol=tol, atol=tol)


# ---- network ops ------------------------------------------------------------------------------
CONV_SHAPES = [  # N, H, W, C, K, R, S, pad, stride, dilation
    (2, 28, 28, 1, 32, 5, 5, 2, 1, 1), (2, 14, 14, 32, 64, 5, 5, 2, 1, 1),
    (1, 9, 7, 3, 4, 7, 7, 3, 2, 1), (3, 8, 8, 5, 6, 1, 1, 0, 2, 1), (2, 8, 8, 4, 4, 1, 1, 0, 1, 1),
    (2, 9, 9, 3, 5, 3, 3, 2, 1, 2)]


@pytest.mark.parametrize("shape", CONV_SHAPES)
def test_conv_fprop_bprop_update(shape):
    N, H, W, C, K, R, S, pad, stride, dil = shape
    x, f = rand(N, H, W, C, seed=19), rand(R, S, C, K, seed=20) * 0.2

    def op(be, tx, tf):
        plan = be.conv_layer(N, C, H, W, K, R, S, (pad, pad), (stride, stride), (dil, dil))
        o = be.zeros(plan.out_shape)
        be.fprop_conv(plan, tx, tf, o)
        e = be.array(np.cos(np.arange(o.size, dtype=np.float32)).reshape(o.shape))
        gi, gf = be.ones(plan.in_shape), be.ones(plan.filter_shape)
        be.bprop_conv(plan, tf, e, gi, beta=0.5)
        be.update_conv(plan, tx, e, gf, beta=1.0)
        return o, gi, gf
    compare_with_cpu(op, x, f, **GEMM)


@pytest.mark.parametrize("op_name", ["max", "avg"])
@pytest.mark.parametrize("R,S,pad,stride", [(2, 2, 0, 2), (3, 3, 1, 2), (3, 2, 1, 1)])
def test_pooling(op_name, R, S, pad, stride):
    x = rand(2, 9, 8, 3, seed=21)

    def op(be, tx):
        plan = be.pool_layer(op_name, 2, 3, 9, 8, R, S, (pad, pad), (stride, stride))
        o = be.zeros(plan.out_shape)
        be.fprop_pool(plan, tx, o)
        gi = be.ones(plan.in_shape)
        be.bprop_pool(plan, o, gi, beta=1.0)
        return o, gi
    compare_with_cpu(op, x, **F32)


def test_batchnorm_layernorm_softmax_and_cross_entropy():
    x, g, b = rand(50, 7, seed=22), rand(1, 7, seed=23), rand(1, 7, seed=24)
    t = np.eye(7, dtype=np.float32)[np.random.default_rng(0).integers(0, 7, 50)]

    def op(be, tx, tg, tb, tt):
        y, xhat, mean, inv = be.zeros((50, 7)), be.zeros((50, 7)), be.zeros((1, 7)), \
            be.zeros((1, 7))
        rm, rv = be.zeros((1, 7)), be.ones((1, 7))
        be.batchnorm_fprop(tx, tg, tb, y, xhat, mean, inv, rm, rv)
        dx, dg, db = be.zeros((50, 7)), be.zeros((1, 7)), be.zeros((1, 7))
        be.batchnorm_bprop(tx, xhat, inv, tg, dx, dg, db)
        ly, lxhat, linv = be.zeros((50, 7)), be.zeros((50, 7)), be.zeros((50, 1))
        be.layernorm_fprop(tx, tg, tb, ly, lxhat, linv)
        ldx, ldg, ldb = be.zeros((50, 7)), be.zeros((1, 7)), be.zeros((1, 7))
        be.layernorm_bprop(tx, lxhat, linv, tg, ldx, ldg, ldb)
        sm, scaled = be.zeros((50, 7)), be.zeros((50, 7))
        scaled[:] = tx * 30.0
        be.softmax(scaled, sm)
        probs, grad = be.zeros((50, 7)), be.zeros((50, 7))
        loss = be.softmax_cross_entropy(tx, tt, probs, grad, 1.0 / 50)
        return y, rm, rv, dx, dg, db, ly, linv, ldx, ldg, ldb, sm, probs, grad, np.float32(loss)
    compare_with_cpu(op, x, g, b, t, rtol=1e-4, atol=1e-5)


def test_masked_softmax_rows_and_permute():
    x, mask = rand(4, 3, 5, seed=25), (np.random.default_rng(1).random((2, 5)) > 0.3)
    table, ids = rand(11, 6, seed=26), np.array([[3, 0, 3], [10, 3, 7]], dtype=np.int32)
    rows = rand(2, 3, 6, seed=27)

    def op(be, tx, tm, tt, ti, tr):
        out = be.zeros((4, 3, 5))
        be.masked_softmax(tx, out, scale=0.5, causal=True, key_mask=tm)
        dx = be.zeros((4, 3, 5))
        be.masked_softmax_bprop(out, tx, dx, scale=0.5)
        got = be.zeros((2, 3, 6))
        be.take_rows(tt, ti, got)
        grad = be.zeros((11, 6))
        be.scatter_add_rows(grad, ti, tr)
        perm = be.zeros((5, 4, 3))
        be.permute_axes(tx, perm, (2, 0, 1))
        swap = be.zeros((4, 5, 3))
        be.permute_axes(tx, swap, (0, 2, 1))
        return out, dx, got, grad, perm, swap
    compare_with_cpu(op, x, mask.astype(np.float32), table, ids, rows, **F32)
    be = make_backend("gpu")
    with pytest.raises(IndexError, match=r"id 11 at position \(0, 1\)"):
        be.take_rows(be.array(table), be.array(np.array([[1, 11]], dtype=np.int32)),
                     be.zeros((1, 2, 6)))


def test_16_bit_storage_round_trips():
    x = rand(5, 6, seed=28)
    for dtype, tol in ((np.float16, 1e-3), ("bf16", 8e-3)):
        be = make_backend("gpu", dtype=dtype)
        t = be.array(x)
        np.testing.assert_allclose(t.get().astype(np.float32), x, rtol=tol, atol=tol)
        y = be.empty((5, 6))
        y[:] = t * 2.0 + 1.0
        np.testing.assert_allclose(y.get().astype(np.float32), x * 2 + 1, rtol=2 * tol,
                                   atol=2 * tol)


# ---- randomness -------------------------------------------------------------------------------
def test_uniform_is_the_philox_stream_and_reproducible():
    be = make_backend("gpu", seed=123)
    u, v = be.empty((1001,)), be.empty((7, 9))
    be.uniform(u)
    be.uniform(v, low=-1.0, high=2.0)
    np.testing.assert_array_equal(u.get(), philox.uniform(1001, 123, 0))
    want = -1.0 + philox.uniform(63, 123, philox.draw_groups(1001)) * np.float32(3.0)
    np.testing.assert_allclose(v.get().ravel(), want, rtol=1e-6, atol=1e-6)
    masks = []
    for _ in range(2):
        be = make_backend("gpu", seed=7)
        m = be.empty((64, 33))
        be.dropout_mask(m, 0.6)
        masks.append(m.get())
    assert np.array_equal(masks[0], masks[1]) and abs((masks[0] > 0).mean() - 0.6) < 0.03


# ---- training ---------------------------------------------------------------------------------
def _train(backend, steps, X, y, watch_allocations=False):
    from neonlite.data import ArrayIterator
    from neonlite.layers import GeneralizedCost
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.transforms import CrossEntropyMulti
    be = neonlite.gen_backend(backend, batch_size=32, rng_seed=0, datatype=np.float32)
    data = ArrayIterator(X, y, nclass=10, shuffle=False)
    model = lenet(keep=1.0)
    cost = GeneralizedCost(CrossEntropyMulti())
    model.initialize(data, cost)
    opt = GradientDescentMomentum(0.05, momentum_coef=0.9, wdecay=1e-4)
    losses, allocations = [], []
    batches = data.batches(shuffle=False)
    for _ in range(steps):
        x, t = next(batches)
        losses.append(model.train_step(x, t, opt, 0))
        if watch_allocations:
            be.synchronize()
            allocations.append(be.allocations)
    return np.array(losses), allocations, be


def _data(n):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, n)


def test_lenet_training_parity_with_cpu():
    """20 SGD steps from the same seed (so the same initial weights, drawn on the host): the
    losses agree to 1e-4 relative step by step.  Dropout keeps everything (keep=1.0) so the
    backends' different dropout generators do not enter the comparison."""
    X, y = _data(20 * 32)
    cpu, _, _ = _train("cpu", 20, X, y)
    gpu, _, _ = _train("gpu", 20, X, y)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, err_msg="GPU losses differ from the CPU's")
    assert cpu[-1] < cpu[0]


def test_no_allocation_after_the_first_step():
    X, y = _data(5 * 32)
    _, allocations, be = _train("gpu", 5, X, y, watch_allocations=True)
    assert allocations[1:] == [allocations[0]] * 4, \
        f"device allocations after each step: {allocations}"
    compiles = be.executor.compiles
    assert compiles > 0


def test_clean_exit_and_clear_errors():
    code = ("import numpy as np, neonlite; be = neonlite.gen_backend('gpu', batch_size=2); "
            "t = be.array(np.ones((3, 3), np.float32)); t[:] = t * 2.0; "
            "assert t.get().sum() == 18.0")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "context stack" not in result.stderr and "clean-up operation failed" not in \
        result.stderr, result.stderr[-2000:]
    with pytest.raises(BackendUnavailable, match=r"device_id 99 does not exist"):
        neonlite.gen_backend("gpu", device_id=99)


# ---- implicit-GEMM convolution in 16 bits, fused epilogue ---------------------------------------
CONV16_SHAPES = [  # LeNet, ResNet-20 (3x3 and the 1x1 stride-2 shortcut), a VGG block, odd ones
    (8, 28, 28, 1, 32, 5, 5, 2, 1, 1), (8, 32, 32, 16, 16, 3, 3, 1, 1, 1),
    (8, 32, 32, 16, 32, 1, 1, 0, 2, 1), (4, 32, 32, 64, 64, 3, 3, 1, 1, 1),
    (1, 9, 7, 3, 4, 7, 7, 3, 2, 1), (3, 8, 8, 5, 6, 1, 1, 0, 2, 1)]


@pytest.mark.parametrize("dtype,tol", [(np.float16, 1e-2), ("bf16", 3e-2)])
@pytest.mark.parametrize("shape", CONV16_SHAPES)
def test_conv_16_bit_tensor_cores(shape, dtype, tol):
    """The tensor-core kernels against the float32 CPU result on the same rounded inputs;
    tolerance relative to each output's largest magnitude."""
    N, H, W, C, K, R, S, pad, stride, dil = shape
    be = make_backend("gpu", dtype=dtype)
    x, f = be.array(rand(N, H, W, C, seed=30)), be.array(rand(R, S, C, K, seed=31) * 0.2)
    plan = be.conv_layer(N, C, H, W, K, R, S, (pad, pad), (stride, stride), (dil, dil))
    o, gi, gf = be.zeros(plan.out_shape), be.zeros(plan.in_shape), be.zeros(plan.filter_shape)
    be.fprop_conv(plan, x, f, o)
    e = be.array(np.cos(np.arange(o.size, dtype=np.float32)).reshape(o.shape))
    be.bprop_conv(plan, f, e, gi)
    be.update_conv(plan, x, e, gf)
    cpu = make_backend("cpu")
    cx, cf, ce = (cpu.array(t.get().astype(np.float32)) for t in (x, f, e))
    cplan = cpu.conv_layer(N, C, H, W, K, R, S, (pad, pad), (stride, stride), (dil, dil))
    co, cgi, cgf = cpu.zeros(plan.out_shape), cpu.zeros(plan.in_shape), \
        cpu.zeros(plan.filter_shape)
    cpu.fprop_conv(cplan, cx, cf, co)
    cpu.bprop_conv(cplan, cf, ce, cgi)
    cpu.update_conv(cplan, cx, ce, cgf)
    for got, want in ((o, co), (gi, cgi), (gf, cgf)):
        want = want.get()
        np.testing.assert_allclose(got.get().astype(np.float32), want, rtol=0,
                                   atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
def test_conv_fprop_fuses_bias_and_relu(dtype):
    be = make_backend("gpu", dtype=dtype)
    x, f, b = rand(2, 10, 10, 8, seed=32), rand(3, 3, 8, 12, seed=33) * 0.3, rand(12, seed=34)
    plan = be.conv_layer(2, 8, 10, 10, 12, 3, 3, (1, 1))
    o = be.zeros(plan.out_shape)
    be.fprop_conv(plan, be.array(x), be.array(f), o, bias=be.array(b), relu=True)
    cpu = make_backend("cpu")
    co = cpu.zeros(plan.out_shape)
    cpu.fprop_conv(cpu.conv_layer(2, 8, 10, 10, 12, 3, 3, (1, 1)), cpu.array(x), cpu.array(f), co)
    want = np.maximum(co.get() + b, 0.0)
    tol = 1e-4 if dtype is np.float32 else 3e-2 * np.abs(want).max()
    np.testing.assert_allclose(o.get().astype(np.float32), want, rtol=0, atol=tol)


def test_batchnorm_fused_relu_and_large_vocab_cross_entropy_16_bit():
    """Batch norm with its ReLU fused (fprop and the masked bprop) against the unfused CPU
    ops; softmax-cross-entropy over 50257 classes in bfloat16 and float16 with logits past
    exp's float16 range, for a mean (scale 1/rows) and a summed loss."""
    x, g, b = rand(200, 24, seed=35), rand(1, 24, seed=36), rand(1, 24, seed=37)
    dy = rand(200, 24, seed=38)
    for dtype, tol in ((np.float32, 1e-4), ("bf16", 3e-2)):
        be, cpu = make_backend("gpu", dtype=dtype), make_backend("cpu")
        outs = {}
        for name, bk in (("gpu", be), ("cpu", cpu)):
            t = [bk.array(a) for a in (x, g, b, dy)]
            y, xhat, mean, inv = (bk.zeros(s) for s in ((200, 24), (200, 24), (1, 24), (1, 24)))
            rm, rv = bk.zeros((1, 24)), bk.ones((1, 24))
            dx, dg, db = bk.zeros((200, 24)), bk.zeros((1, 24)), bk.zeros((1, 24))
            if name == "gpu":
                bk.batchnorm_fprop(t[0], t[1], t[2], y, xhat, mean, inv, rm, rv, relu=True)
                bk.batchnorm_bprop(t[3], xhat, inv, t[1], dx, dg, db, y=y)
            else:
                bk.batchnorm_fprop(t[0], t[1], t[2], y, xhat, mean, inv, rm, rv)
                y[:] = bk.maximum(y, 0.0)
                # the GPU's own ReLU mask: where the pre-activation is within bf16 rounding
                # of 0 (0.0024 at [174, 8]) the two backends may decide it differently
                masked = bk.zeros((200, 24))
                masked[:] = t[3] * bk.array((outs["gpu"][0] > 0).astype(np.float32))
                bk.batchnorm_bprop(masked, xhat, inv, t[1], dx, dg, db)
            outs[name] = [a.get().astype(np.float32) for a in (y, rm, rv, dx, dg, db)]
        for got, want in zip(outs["gpu"], outs["cpu"]):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1, np.abs(want).max()))
    rows, classes = 16, 50257
    rng = np.random.default_rng(39)
    logits = rng.normal(size=(rows, classes)).astype(np.float32) * 3
    logits[0, 7] = 60.0
    ids = rng.integers(0, classes, rows)
    targets = np.zeros((rows, classes), np.float32)
    targets[np.arange(rows), ids] = 1.0
    lse = logits.max(-1, keepdims=True).astype(np.float64)
    lse = lse + np.log(np.exp(logits - lse).sum(-1, keepdims=True))
    p = np.exp(logits - lse)
    want_loss = float((lse[:, 0] - logits[np.arange(rows), ids]).sum())
    for dtype, tol in ((np.float16, 2e-2), ("bf16", 6e-2)):
        be = make_backend("gpu", dtype=dtype)
        lg, tg = be.array(logits), be.array(targets)
        for scale in (1.0 / rows, 1.0):
            probs, grad = be.zeros((rows, classes)), be.zeros((rows, classes))
            loss = be.softmax_cross_entropy(lg, tg, probs, grad, scale)
            rounded = lg.get().astype(np.float64)
            assert np.isfinite(loss) and abs(loss - want_loss) < tol * abs(want_loss) + 1.0
            np.testing.assert_allclose(grad.get().astype(np.float32), scale * (p - targets),
                                       atol=tol * scale)
            assert np.isfinite(rounded).all()
