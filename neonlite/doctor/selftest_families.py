"""The kernel families ``neonlite doctor --gpu --selftest`` compares with the CPU backend.

Each family is a function ``check(make_gpu, make_cpu)`` returning a list of
``(what, got, want)``: the same inputs through the GPU backend and through the CPU backend (or,
for Philox, the numpy reference of the stream).  ``make_gpu(dtype)`` gives a GPU backend of
batch size 4 and seed 0 storing ``dtype`` (``np.float32``, ``"bf16"``, ...): on a user's machine
``gen_backend("gpu", ...)``, in the test suite the same backend class over the host emulator.
``make_cpu()`` gives a float32 CPU backend.  Arrays are float32, batch-first, images NHWC.

:data:`FAMILIES` lists ``(name, check, tolerance)``; the error of one comparison is
``max |got - want| / max(1, max |want|)``.
"""
import numpy as np

from ..backends import philox


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _pair(make_gpu, make_cpu, dtype=np.float32):
    return (("gpu", make_gpu(dtype)), ("cpu", make_cpu()))


def _compare(results):
    """[(what, got, want)] from ``{"gpu": {what: array}, "cpu": {what: array}}``."""
    return [(what, results["gpu"][what], results["cpu"][what]) for what in results["cpu"]]


# (N, H, W, C, K, R, S, pad, stride, dilation)
CONV_SHAPES = ((2, 7, 6, 3, 5, 3, 3, 1, 2, 1), (2, 6, 6, 8, 16, 3, 3, 1, 1, 2),
               (2, 5, 5, 4, 8, 1, 1, 0, 1, 1), (4, 12, 12, 16, 32, 5, 5, 2, 1, 1))


def _conv(make_gpu, make_cpu, dtype, shapes=CONV_SHAPES):
    results = {}
    for name, be in _pair(make_gpu, make_cpu, dtype):
        got = results[name] = {}
        for i, (N, H, W, C, K, R, S, pad, stride, dil) in enumerate(shapes):
            x, f = _rand(N, H, W, C, seed=1 + i), _rand(R, S, C, K, seed=2 + i) * 0.3
            plan = be.conv_layer(N, C, H, W, K, R, S, (pad, pad), (stride, stride), (dil, dil))
            tx, tf = be.array(x), be.array(f)
            out = be.zeros(plan.out_shape)
            be.fprop_conv(plan, tx, tf, out)
            e = be.array(np.cos(np.arange(out.size, dtype=np.float32)).reshape(out.shape))
            gi, gf = be.ones(plan.in_shape), be.ones(plan.filter_shape)
            be.bprop_conv(plan, tf, e, gi, beta=0.5)
            be.update_conv(plan, tx, e, gf, beta=1.0)
            bias = be.array(_rand(K, seed=3 + i))
            fused = be.zeros(plan.out_shape)
            be.fprop_conv(plan, tx, tf, fused, bias=bias, relu=True)
            got.update({f"shape {i} fprop": out.get(), f"shape {i} bprop": gi.get(),
                        f"shape {i} update": gf.get(), f"shape {i} bias+relu": fused.get()})
    return _compare(results)


def conv_simt(make_gpu, make_cpu):
    """Implicit-GEMM convolution on the CUDA cores (float32)."""
    return _conv(make_gpu, make_cpu, np.float32)


def conv_tensor_core(make_gpu, make_cpu):
    """Implicit-GEMM convolution on tensor cores (bfloat16 and float16 storage)."""
    shapes = CONV_SHAPES[:3]
    return [(f"bf16 {w}", g, t) for w, g, t in _conv(make_gpu, make_cpu, "bf16", shapes)] + \
           [(f"f16 {w}", g, t) for w, g, t in _conv(make_gpu, make_cpu, np.float16, shapes)]


def pooling(make_gpu, make_cpu):
    results = {}
    x = _rand(2, 7, 6, 3, seed=4)
    for name, be in _pair(make_gpu, make_cpu):
        got = results[name] = {}
        for op in ("max", "avg"):
            for pad, stride in (((1, 1), (2, 2)), ((0, 0), (1, 1))):
                plan = be.pool_layer(op, 2, 3, 7, 6, 3, 3, pad, stride)
                out, gi = be.zeros(plan.out_shape), be.ones(plan.in_shape)
                be.fprop_pool(plan, be.array(x), out)
                be.bprop_pool(plan, out, gi, beta=1.0)
                got[f"{op} stride {stride[0]} fprop"] = out.get()
                got[f"{op} stride {stride[0]} bprop"] = gi.get()
    return _compare(results)


def batch_norm(make_gpu, make_cpu):
    results = {}
    x, g, b = _rand(70, 9, seed=8) + 3, _rand(1, 9, seed=9), _rand(1, 9, seed=10)
    dy = _rand(70, 9, seed=11)
    for name, be in _pair(make_gpu, make_cpu):
        got = results[name] = {}
        for relu in (False, True):
            tx, tg, tb, tdy = (be.array(a) for a in (x, g, b, dy))
            y, xhat = be.zeros((70, 9)), be.zeros((70, 9))
            mean, inv, rm, rv = be.zeros((1, 9)), be.zeros((1, 9)), be.zeros((1, 9)), \
                be.ones((1, 9))
            be.batchnorm_fprop(tx, tg, tb, y, xhat, mean, inv, rm, rv, relu=relu)
            dx, dg, db = be.ones((70, 9)), be.zeros((1, 9)), be.zeros((1, 9))
            be.batchnorm_bprop(tdy, xhat, inv, tg, dx, dg, db, beta_acc=0.5,
                               y=y if relu else None)
            iy, ixhat = be.zeros((70, 9)), be.zeros((70, 9))
            be.batchnorm_fprop(tx, tg, tb, iy, ixhat, mean, inv, rm, rv, inference=True,
                               relu=relu)
            for what, t in (("y", y), ("xhat", xhat), ("mean", mean), ("inv std", inv),
                            ("running mean", rm), ("running var", rv), ("dx", dx),
                            ("dgamma", dg), ("dbeta", db), ("inference y", iy)):
                got[f"{what}{' relu' if relu else ''}"] = t.get()
    return _compare(results)


def layer_norm(make_gpu, make_cpu):
    results = {}
    x, g, b = _rand(70, 33, seed=12) + 3, _rand(1, 33, seed=13), _rand(1, 33, seed=14)
    dy = _rand(70, 33, seed=15)
    for name, be in _pair(make_gpu, make_cpu):
        tx, tg, tb, tdy = (be.array(a) for a in (x, g, b, dy))
        y, xhat, inv = be.zeros((70, 33)), be.zeros((70, 33)), be.zeros((70, 1))
        be.layernorm_fprop(tx, tg, tb, y, xhat, inv)
        dx, dg, db = be.zeros((70, 33)), be.ones((1, 33)), be.zeros((1, 33))
        be.layernorm_bprop(tdy, xhat, inv, tg, dx, dg, db)
        results[name] = {"y": y.get(), "inv std": inv.get(), "dx": dx.get(),
                         "dgamma": dg.get(), "dbeta": db.get()}
    return _compare(results)


def softmax_cross_entropy(make_gpu, make_cpu):
    results = {}
    for name, be in _pair(make_gpu, make_cpu):
        got = results[name] = {}
        for n, classes in ((70, 9), (8, 1000)):
            x = _rand(n, classes, seed=16) * 4
            t = np.eye(classes, dtype=np.float32)[
                np.random.default_rng(1).integers(0, classes, n)]
            probs, grad = be.zeros((n, classes)), be.zeros((n, classes))
            loss = be.softmax_cross_entropy(be.array(x), be.array(t), probs, grad, 1.0 / n)
            sm = be.zeros((n, classes))
            be.softmax(be.array(x * 5), sm)
            got.update({f"{classes} classes probs": probs.get(),
                        f"{classes} classes grad": grad.get(),
                        f"{classes} classes loss": np.float64(loss),
                        f"{classes} classes softmax": sm.get()})
    return _compare(results)


def rows(make_gpu, make_cpu):
    results = {}
    table, rows_in = _rand(11, 6, seed=5), _rand(2, 3, 6, seed=6)
    ids = np.array([[3, 0, 3], [10, 3, 7]], dtype=np.int32)
    for name, be in _pair(make_gpu, make_cpu):
        taken, grad = be.zeros((2, 3, 6)), be.zeros((11, 6))
        be.take_rows(be.array(table), be.array(ids, dtype=np.int32), taken)
        be.scatter_add_rows(grad, be.array(ids, dtype=np.int32), be.array(rows_in))
        results[name] = {"take_rows": taken.get(), "scatter_add_rows (repeated ids)": grad.get()}
    return _compare(results)


def philox_streams(make_gpu, make_cpu):
    """The device's Philox draws (seed 0, counter 0) against the numpy reference stream, and
    its per-example dropout masks against the CPU backend's, bit for bit."""
    be = make_gpu(np.float32)
    u = be.empty((1001,))
    be.uniform(u)
    out = [("uniform, 1001 draws", u.get(), philox.uniform(1001, 0, 0))]
    masks = {}
    for name, b in (("gpu", be), ("cpu", make_cpu())):
        m = b.empty((3, 5, 9))
        b.example_dropout_mask(m, 0.75, key=123456789012, step=2, stream=5, first=7, examples=3)
        masks[name] = m.get()
    out.append(("per-example dropout masks", masks["gpu"], masks["cpu"]))
    return out


def blocksparse(make_gpu, make_cpu):
    from ..blocksparse import compile_layout, layouts
    results = {}
    bs, M = 16, 37
    layout = layouts.random((3, 4), 0.5, seed=bs)
    layout[0], layout[1], layout[:, 2] = 1, 0, 0
    tables = compile_layout(layout)
    x, e = _rand(M, 3 * bs, seed=20), _rand(M, 4 * bs, seed=21)
    w = _rand(tables.nnz, bs, bs, seed=22)
    heads, nq, d = 2, 4, 8
    att = layouts.local((heads, nq, nq), 2, causal=True)
    att_tables = compile_layout(att)
    q, k = _rand(2, heads, nq * bs, d, seed=23), _rand(2, heads, nq * bs, d, seed=24)
    dp = _rand(2, att_tables.nnz, bs, bs, seed=25)
    for name, be in _pair(make_gpu, make_cpu):
        plan = be.blocksparse_layer(layout, bs)
        y, dx, dw = be.empty((M, 4 * bs)), be.ones((M, 3 * bs)), be.ones(w.shape)
        tx, te, tw = be.array(x), be.array(e), be.array(w)
        be.blocksparse_fprop(plan, tx, tw, y)
        be.blocksparse_bprop(plan, te, tw, dx, beta=1.0)
        be.blocksparse_update(plan, tx, te, dw, beta=0.5)
        aplan = be.blocksparse_layer(att, bs)
        s, p, ds = (be.empty((2, att_tables.nnz, bs, bs)) for _ in range(3))
        o = be.empty((2, heads, nq * bs, d))
        be.blocksparse_sdd(aplan, be.array(q), be.array(k), s, alpha=d ** -0.5)
        be.blocksparse_softmax(aplan, s, p, 1.0, True)
        be.blocksparse_softmax_bprop(aplan, p, be.array(dp), ds, 2.0)
        be.blocksparse_dsd(aplan, p, be.array(k), o)
        results[name] = {"fprop": y.get(), "bprop": dx.get(), "update": dw.get(),
                         "sdd": s.get(), "softmax": p.get(), "softmax bprop": ds.get(),
                         "dsd": o.get()}
    return _compare(results)


def cublas_gemm(make_gpu, make_cpu):
    results = {}
    a, b = _rand(37, 53, seed=30), _rand(53, 29, seed=31)
    c0 = _rand(37, 29, seed=32)
    ba, bb = _rand(3, 17, 24, seed=33), _rand(3, 24, 9, seed=34)
    for name, be in _pair(make_gpu, make_cpu):
        got = results[name] = {}
        for trans_a in (False, True):
            for trans_b in (False, True):
                ta = be.array(a.T.copy() if trans_a else a)
                tb = be.array(b.T.copy() if trans_b else b)
                c = be.array(c0)
                be.compound_dot(ta, tb, c, alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b)
                got[f"gemm trans {'T' if trans_a else 'N'}{'T' if trans_b else 'N'}"] = c.get()
        out = be.zeros((3, 17, 9))
        be.batched_dot(be.array(ba), be.array(bb), out)
        got["batched gemm"] = out.get()
    return _compare(results)


def training_step(make_gpu, make_cpu):
    """Three SGD steps of conv + batch norm + ReLU, pooling, affine + softmax from the same
    initial weights: the losses and the final parameters."""
    from .. import backends
    from ..data import ArrayIterator
    from ..initializers import GlorotUniform, Kaiming
    from ..layers import Affine, Conv, GeneralizedCost, Pooling
    from ..model import Model
    from ..optimizers import GradientDescentMomentum
    from ..transforms import CrossEntropyMulti, Rectlin, Softmax
    rng = np.random.default_rng(0)
    X, y = rng.random((12, 8, 8, 2)).astype(np.float32), rng.integers(0, 3, 12)
    results = {}
    for name, be in _pair(make_gpu, make_cpu):
        backends._current = be
        be.rng = np.random.default_rng(0)
        data = ArrayIterator(X, y, nclass=3, shuffle=False)
        model = Model([Conv((3, 3, 4), padding=1, init=Kaiming(), batch_norm=True,
                            activation=Rectlin()),
                       Pooling(2, strides=2),
                       Affine(3, init=GlorotUniform(), activation=Softmax())])
        model.initialize(data, GeneralizedCost(CrossEntropyMulti()))
        opt = GradientDescentMomentum(0.1, momentum_coef=0.9)
        losses = [model.train_step(xb, tb, opt, 0) for xb, tb in data.batches(False)]
        results[name] = {"losses": np.array(losses, np.float64),
                         **{f"parameter {k}": v for k, v in model.get_params().items()}}
    return _compare(results)


# (name printed, check, tolerance on max |got - want| / max(1, max |want|))
FAMILIES = (
    ("conv simt (f32)", conv_simt, 1e-4),
    ("conv tensor-core (bf16, f16)", conv_tensor_core, 3e-2),
    ("pooling", pooling, 1e-5),
    ("batch norm", batch_norm, 1e-4),
    ("layer norm", layer_norm, 1e-4),
    ("softmax + cross-entropy", softmax_cross_entropy, 1e-4),
    ("rows (gather, scatter-add)", rows, 1e-5),
    ("philox", philox_streams, 0.0),
    ("block-sparse", blocksparse, 1e-4),
    ("cuBLAS GEMM", cublas_gemm, 1e-4),
    ("training step", training_step, 1e-4),
)
