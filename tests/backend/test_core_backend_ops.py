"""Backend ops on every available backend, against numpy references written out here.

Tests taking the ``be`` fixture run once per backend (a float32 backend of batch 4; 'gpu' is
skipped with the reason where it cannot run) and compare with a direct numpy reference; tests
using ``compare_with_cpu`` run the op on every available backend and compare with the CPU.
"""
import math

import numpy as np
import pytest
from support.harness import compare_with_cpu

import neonlite

RTOL, ATOL = 1e-5, 1e-5


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def close(got, want, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol)


# ---- tensors ------------------------------------------------------------------------------------
def test_tensor_create_get_set_and_views(be):
    t = be.zeros((3, 4))
    assert t.shape == (3, 4) and t.dtype == np.float32 and t.size == 12
    assert np.all(be.ones((2, 2)).get() == 1.0)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t.set(a)
    host = t.get()
    host[0, 0] = 99
    assert t.get()[0, 0] == 0, "get() must return a copy"
    t[1:3][:] = 7.0
    assert np.all(t.get()[1:] == 7.0) and np.all(t.get()[0] == a[0]), "slices must be views"
    flat = t.reshape(12)
    flat[:] = flat * 2.0
    assert np.all(t.get()[0] == 2 * a[0]), "reshape must be a view"
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        t.set(np.zeros(5))


# ---- op-trees -----------------------------------------------------------------------------------
def test_optree_arithmetic_with_broadcasting(be):
    a, b, c = rand(5, 3, seed=1), rand(5, 3, seed=2), rand(1, 3, seed=3)
    ta, tb, tc = be.array(a), be.array(b), be.array(c)
    out = be.empty((5, 3))
    out[:] = ta * tb + tc - 2.0 * ta / (be.absolute(tb) + 1.0)
    close(out.get(), a * b + c - 2.0 * a / (np.abs(b) + 1.0))
    out[:] = -ta + 3.0 - (1.0 - tc) ** 2
    close(out.get(), -a + 3.0 - (1.0 - c) ** 2)
    out[:] = be.maximum(ta, 0.0) + be.minimum(tb, tc) * be.clip(ta, -0.5, 0.5)
    close(out.get(), np.maximum(a, 0) + np.minimum(b, c) * np.clip(a, -0.5, 0.5))


def test_optree_unary_functions(be):
    a = rand(4, 6, seed=4)
    pos = np.abs(a) + 0.5
    ta, tp = be.array(a), be.array(pos)
    out = be.empty((4, 6))
    cases = [(be.exp(ta), np.exp(a)), (be.log(tp), np.log(pos)), (be.sqrt(tp), np.sqrt(pos)),
             (be.rsqrt(tp), 1 / np.sqrt(pos)), (be.tanh(ta), np.tanh(a)),
             (be.sig(ta), 1 / (1 + np.exp(-a))), (be.sign(ta), np.sign(a)),
             (be.square(ta), a * a), (abs(ta), np.abs(a))]
    for tree, want in cases:
        out[:] = tree
        close(out.get(), want)


def test_optree_in_place_update_reads_old_values(be):
    w, g = rand(3, 4, seed=5), rand(3, 4, seed=6)
    tw, tg = be.array(w), be.array(g)
    tw[:] = tw - 0.1 * tg / (be.sqrt(tw * tw) + 1.0)
    close(tw.get(), w - 0.1 * g / (np.sqrt(w * w) + 1.0))


def test_optree_comparisons_give_zero_one(be):
    a, b = rand(4, 5, seed=7), rand(4, 5, seed=8)
    a[0, :3] = b[0, :3]
    ta, tb = be.array(a), be.array(b)
    out = be.empty((4, 5))
    for tree, want in [(ta > tb, a > b), (ta >= tb, a >= b), (ta < tb, a < b),
                       (ta <= tb, a <= b), (ta == tb, a == b), (ta != tb, a != b)]:
        out[:] = tree
        assert np.array_equal(out.get(), want.astype(np.float32))
    out[:] = (ta > 0.0) * tb
    close(out.get(), (a > 0) * b)


def test_optree_reductions_keep_reduced_axes(be):
    x = rand(4, 5, 3, seed=9)
    tx = be.array(x)
    for axis in (0, 1, 2, (0, 2)):
        shape = tuple(1 if i in np.atleast_1d(axis) else s for i, s in enumerate(x.shape))
        for fn, ref in [(be.sum, np.sum), (be.max, np.max), (be.min, np.min),
                        (be.mean, np.mean), (be.var, np.var)]:
            out = be.empty(shape)
            out[:] = fn(tx, axis=axis)
            close(out.get(), ref(x, axis=axis, keepdims=True), rtol=1e-4)
    total = be.empty((1, 1, 1))
    total[:] = be.sum(tx)
    close(total.get(), x.sum(keepdims=True), rtol=1e-5)
    centred = be.empty(x.shape)
    centred[:] = tx - be.max(tx, axis=1)
    close(centred.get(), x - x.max(axis=1, keepdims=True))
    m = be.empty((4, 1, 1))
    m[:] = be.mean(tx * tx + 1.0, axis=(1, 2))
    close(m.get(), (x * x + 1).mean(axis=(1, 2), keepdims=True), rtol=1e-5)


def test_optree_argmax_argmin(be):
    x = rand(6, 7, seed=10)
    tx = be.array(x)
    rows = be.empty((6, 1))
    rows[:] = be.argmax(tx, axis=1)
    assert np.array_equal(rows.get()[:, 0], x.argmax(axis=1))
    cols = be.empty((1, 7))
    cols[:] = be.argmin(tx, axis=0)
    assert np.array_equal(cols.get()[0], x.argmin(axis=0))
    flat = be.empty((1, 1))
    flat[:] = be.argmax(tx)
    assert flat.get().item() == x.argmax()


def test_optree_matches_cpu_on_every_backend():
    a, b = rand(8, 3, seed=11), np.abs(rand(1, 3, seed=12)) + 0.1

    def op(be, ta, tb):
        out = be.empty((8, 3))
        out[:] = be.exp(ta - be.max(ta, axis=0)) / tb + be.sqrt(be.square(ta) + tb)
        return out

    got = compare_with_cpu(op, a, b)
    close(got, np.exp(a - a.max(axis=0)) / b + np.sqrt(a * a + b))


# ---- GEMM ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("transA", [False, True])
@pytest.mark.parametrize("transB", [False, True])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 0.0), (2.0, 1.0), (-1.0, 0.3)])
def test_compound_dot(be, transA, transB, alpha, beta):
    m, k, n = 5, 7, 3
    a = rand(*((k, m) if transA else (m, k)), seed=13)
    b = rand(*((n, k) if transB else (k, n)), seed=14)
    c = rand(m, n, seed=15)
    tc = be.array(c)
    be.compound_dot(be.array(a), be.array(b), tc, alpha=alpha, beta=beta, transA=transA,
                    transB=transB)
    want = alpha * (a.T if transA else a) @ (b.T if transB else b) + beta * c
    close(tc.get(), want)


def test_compound_dot_on_views_of_batch_buffers(be):
    x = rand(4, 2, 3, seed=16)
    w = rand(6, 5, seed=17)
    tx, out = be.array(x), be.zeros((4, 5))
    be.compound_dot(tx.reshape(4, 6), be.array(w), out)
    close(out.get(), x.reshape(4, 6) @ w)


@pytest.mark.parametrize("transA,transB", [(False, False), (True, False), (False, True)])
def test_batched_dot(be, transA, transB):
    a = rand(3, *((4, 5) if transA else (5, 4)), seed=18)
    b = rand(3, *((2, 4) if transB else (4, 2)), seed=19)
    c = rand(3, 5, 2, seed=20)
    tc = be.array(c)
    be.batched_dot(be.array(a), be.array(b), tc, alpha=1.5, beta=0.5, transA=transA,
                   transB=transB)
    opa = np.swapaxes(a, 1, 2) if transA else a
    opb = np.swapaxes(b, 1, 2) if transB else b
    close(tc.get(), 1.5 * np.einsum("bij,bjk->bik", opa, opb) + 0.5 * c)


# ---- convolution (naive loop reference) ---------------------------------------------------------
def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_geometry(x_shape, f_shape, pad, stride, dil):
    (_, H, W, _), (R, S, _, _) = x_shape, f_shape
    (ph, pw), (sh, sw), (dh, dw) = _pair(pad), _pair(stride), _pair(dil)
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    return P, Q, ph, pw, sh, sw, dh, dw


def conv_ref(x, f, pad, stride, dil):
    """O[n, p, q, k] = sum_{r, s, c} Xpad[n, p*sh + r*dh, q*sw + s*dw, c] * F[r, s, c, k]."""
    P, Q, ph, pw, sh, sw, dh, dw = conv_geometry(x.shape, f.shape, pad, stride, dil)
    xp = np.pad(x.astype(np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    out = np.zeros((x.shape[0], P, Q, f.shape[3]))
    for p in range(P):
        for q in range(Q):
            for r in range(f.shape[0]):
                for s in range(f.shape[1]):
                    out[:, p, q] += xp[:, p * sh + r * dh, q * sw + s * dw] @ f[r, s]
    return out


def conv_bprop_ref(e, f, x_shape, pad, stride, dil):
    P, Q, ph, pw, sh, sw, dh, dw = conv_geometry(x_shape, f.shape, pad, stride, dil)
    N, H, W, C = x_shape
    dxp = np.zeros((N, H + 2 * ph, W + 2 * pw, C))
    for p in range(P):
        for q in range(Q):
            for r in range(f.shape[0]):
                for s in range(f.shape[1]):
                    dxp[:, p * sh + r * dh, q * sw + s * dw] += e[:, p, q] @ f[r, s].T
    return dxp[:, ph:ph + H, pw:pw + W]


def conv_update_ref(x, e, f_shape, pad, stride, dil):
    P, Q, ph, pw, sh, sw, dh, dw = conv_geometry(x.shape, f_shape, pad, stride, dil)
    xp = np.pad(x.astype(np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    df = np.zeros(f_shape)
    for p in range(P):
        for q in range(Q):
            for r in range(f_shape[0]):
                for s in range(f_shape[1]):
                    df[r, s] += xp[:, p * sh + r * dh, q * sw + s * dw].T @ e[:, p, q]
    return df


# (N, H, W, C, K, R, S, pad, stride, dilation)
CONV_SHAPES = {
    "batch1": (1, 5, 5, 3, 2, 3, 3, 1, 1, 1),
    "pointwise": (2, 4, 3, 3, 4, 1, 1, 0, 1, 1),
    "pointwise_stride2": (2, 5, 5, 3, 2, 1, 1, 0, 2, 1),
    "pointwise_padded": (2, 3, 3, 3, 2, 1, 1, 1, 1, 1),
    "stride_gt_filter": (2, 7, 6, 3, 2, 2, 2, 1, 3, 1),
    "dilated_nonsquare": (2, 9, 7, 3, 4, 3, 2, (2, 1), (1, 2), (2, 3)),
    "rect_filter": (3, 6, 8, 1, 5, 2, 4, (0, 2), (2, 1), 1),
}


@pytest.mark.parametrize("case", sorted(CONV_SHAPES))
def test_conv_fprop_bprop_update(be, case):
    N, H, W, C, K, R, S, pad, stride, dil = CONV_SHAPES[case]
    if N > be.bsz:
        pytest.fail("test shapes assume batch <= the fixture's batch size")
    x, f = rand(N, H, W, C, seed=21), rand(R, S, C, K, seed=22)
    plan = be.conv_layer(N, C, H, W, K, R, S, pad=_pair(pad), stride=_pair(stride),
                         dilation=_pair(dil))
    want = conv_ref(x, f, pad, stride, dil)
    assert plan.out_shape == want.shape
    tx, tf, to = be.array(x), be.array(f), be.empty(want.shape)
    be.fprop_conv(plan, tx, tf, to)
    close(to.get(), want, rtol=1e-4)

    e = rand(*want.shape, seed=23)
    te = be.array(e)
    prev = rand(N, H, W, C, seed=24)
    grad_x = be.array(prev)
    be.bprop_conv(plan, tf, te, grad_x)
    close(grad_x.get(), conv_bprop_ref(e, f, x.shape, pad, stride, dil), rtol=1e-4)
    grad_x.set(prev)
    be.bprop_conv(plan, tf, te, grad_x, beta=1.0)
    close(grad_x.get(), prev + conv_bprop_ref(e, f, x.shape, pad, stride, dil), rtol=1e-4)

    df_want = conv_update_ref(x, e, f.shape, pad, stride, dil)
    prev_f = rand(R, S, C, K, seed=25)
    grad_f = be.array(prev_f)
    be.update_conv(plan, tx, te, grad_f, beta=1.0)
    close(grad_f.get(), prev_f + df_want, rtol=1e-4, atol=1e-4)
    other = rand(N, H, W, C, seed=26)
    t_other = be.array(other)
    be.fprop_conv(plan, t_other, tf, to)
    be.update_conv(plan, t_other, te, grad_f)
    close(grad_f.get(), conv_update_ref(other, e, f.shape, pad, stride, dil), rtol=1e-4,
          atol=1e-4)


@pytest.mark.parametrize("layout", ["contiguous", "strided_view"])
def test_conv_update_follows_the_latest_fprop(be, layout):
    """The same input buffer overwritten and fprop'd again: update_conv correlates E with its
    new values (whatever the backend kept from the first fprop is not reused); strided views
    of a larger tensor work like contiguous arrays."""
    N, H, W, C, K = 2, 5, 4, 3, 2
    plan = be.conv_layer(N, C, H, W, K, 3, 3, pad=(1, 1))
    big = be.zeros((N, H, W + 2, C))
    tx = big[:, :, 1:W + 1] if layout == "strided_view" else be.empty((N, H, W, C))
    f = rand(3, 3, C, K, seed=41)
    tf, to = be.array(f), be.empty(plan.out_shape)
    e = rand(*plan.out_shape, seed=44)
    te, grad_f = be.array(e), be.empty((3, 3, C, K))
    for seed in (42, 43):
        x = rand(N, H, W, C, seed=seed)
        tx[:] = be.array(x)
        be.fprop_conv(plan, tx, tf, to)
        close(to.get(), conv_ref(x, f, 1, 1, 1), rtol=1e-4)
        be.update_conv(plan, tx, te, grad_f)
        close(grad_f.get(), conv_update_ref(x, e, grad_f.shape, 1, 1, 1), rtol=1e-4, atol=1e-4)


def test_conv_layer_rejects_a_filter_that_does_not_fit(be):
    with pytest.raises(ValueError, match="does not fit"):
        be.conv_layer(1, 3, 4, 4, 2, 5, 5)
    with pytest.raises(ValueError, match="strides"):
        be.conv_layer(1, 3, 4, 4, 2, 3, 3, stride=(0, 1))


def test_conv_matches_cpu_on_every_backend():
    x, f = rand(3, 6, 5, 3, seed=27), rand(3, 2, 3, 4, seed=28)

    def op(be, tx, tf):
        plan = be.conv_layer(3, 3, 6, 5, 4, 3, 2, pad=(1, 1), stride=(2, 1), dilation=(1, 2))
        out = be.empty(plan.out_shape)
        be.fprop_conv(plan, tx, tf, out)
        return out

    close(compare_with_cpu(op, x, f), conv_ref(x, f, 1, (2, 1), (1, 2)), rtol=1e-4)


# ---- pooling (naive loop reference) -------------------------------------------------------------
def pool_ref(x, op, R, S, pad, stride):
    """Windows over the padded input; padding never wins a max and is not averaged."""
    N, H, W, C = x.shape
    (ph, pw), (sh, sw) = _pair(pad), _pair(stride)
    P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
    out = np.zeros((N, P, Q, C))
    grad_route = np.zeros((P, Q) + x.shape)
    for p in range(P):
        for q in range(Q):
            h0, w0 = p * sh - ph, q * sw - pw
            hs, ws = slice(max(h0, 0), min(h0 + R, H)), slice(max(w0, 0), min(w0 + S, W))
            window = x[:, hs, ws, :]
            if op == "max":
                out[:, p, q] = window.max(axis=(1, 2))
                hit = window == out[:, p, q][:, None, None, :]
                grad_route[p, q][:, hs, ws] = hit
            else:
                out[:, p, q] = window.mean(axis=(1, 2))
                grad_route[p, q][:, hs, ws] = 1.0 / (window.shape[1] * window.shape[2])
    return out, grad_route


@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("H,W,R,S,pad,stride", [(6, 6, 2, 2, 0, 2), (7, 5, 3, 3, 1, 2),
                                                (5, 6, 3, 2, (1, 0), (1, 2)), (4, 4, 3, 3, 2, 1),
                                                (5, 5, 2, 2, 0, 3)])
def test_pooling_fprop_bprop(be, op, H, W, R, S, pad, stride):
    N, C = 2, 3
    rng = np.random.default_rng(29)
    x = (rng.permutation(N * H * W * C).reshape(N, H, W, C) * 0.01).astype(np.float32)
    plan = be.pool_layer(op, N, C, H, W, R, S, pad=_pair(pad), stride=_pair(stride))
    want, route = pool_ref(x, op, R, S, pad, stride)
    assert plan.out_shape == want.shape
    tx, to = be.array(x), be.empty(want.shape)
    be.fprop_pool(plan, tx, to)
    close(to.get(), want)
    e = rand(*want.shape, seed=30)
    grad_want = sum(route[p, q] * e[:, p, q][:, None, None, :]
                    for p in range(want.shape[1]) for q in range(want.shape[2]))
    grad = be.array(np.ones_like(x))
    be.bprop_pool(plan, be.array(e), grad, beta=1.0)
    close(grad.get(), 1.0 + grad_want)
    be.bprop_pool(plan, be.array(e), grad)
    close(grad.get(), grad_want)


# ---- normalization and softmax ------------------------------------------------------------------
def test_batchnorm_fprop_training_inference_and_bprop(be):
    M, C, eps, rho = 12, 3, 1e-5, 0.9
    x, gamma, beta = rand(M, C, seed=31) * 2 + 1, rand(1, C, seed=32), rand(1, C, seed=33)
    t = {k: be.array(v) for k, v in dict(x=x, gamma=gamma, beta=beta).items()}
    y, xhat = be.empty((M, C)), be.empty((M, C))
    mean, invstd = be.empty((1, C)), be.empty((1, C))
    rmean, rvar = be.zeros((1, C)), be.ones((1, C))
    be.batchnorm_fprop(t["x"], t["gamma"], t["beta"], y, xhat, mean, invstd, rmean, rvar,
                       eps=eps, momentum=rho)
    mu, var = x.mean(axis=0, keepdims=True), x.var(axis=0, keepdims=True)
    xh = (x - mu) / np.sqrt(var + eps)
    close(y.get(), gamma * xh + beta, rtol=1e-4)
    close(xhat.get(), xh, rtol=1e-4)
    close(rmean.get(), (1 - rho) * mu)
    close(rvar.get(), rho + (1 - rho) * x.var(axis=0, ddof=1, keepdims=True), rtol=1e-5)

    dy = rand(M, C, seed=34)
    dx, dgamma, dbeta = be.empty((M, C)), be.ones((1, C)), be.ones((1, C))
    be.batchnorm_bprop(be.array(dy), xhat, invstd, t["gamma"], dx, dgamma, dbeta)
    close(dgamma.get(), 1.0 + (dy * xh).sum(axis=0, keepdims=True), rtol=1e-4)
    close(dbeta.get(), 1.0 + dy.sum(axis=0, keepdims=True), rtol=1e-4)
    want_dx = _numeric_vjp(lambda v: gamma * (v - v.mean(0)) / np.sqrt(v.var(0) + eps), x, dy)
    close(dx.get(), want_dx, rtol=1e-3, atol=1e-4)

    be.batchnorm_fprop(t["x"], t["gamma"], t["beta"], y, xhat, mean, invstd, rmean, rvar,
                       eps=eps, momentum=rho, inference=True)
    close(y.get(), gamma * (x - rmean.get()) / np.sqrt(rvar.get() + eps) + beta, rtol=1e-4)


@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_moments_and_apply(be, relu):
    """The two halves of synchronised batch norm: float64 moments of the rows (values offset
    far from zero, where sums of squares would cancel), then normalization with given
    statistics, which matches batchnorm_fprop given the same statistics."""
    M, C, eps = 150, 5, 1e-5
    x = rand(M, C, seed=41) * 0.5 + 100.0
    gamma, beta = rand(1, C, seed=42), rand(1, C, seed=43)
    mean, m2 = be.batchnorm_moments(be.array(x))
    assert mean.dtype == m2.dtype == np.float64 and mean.shape == m2.shape == (C,)
    x64 = x.astype(np.float64)
    close(mean, x64.mean(axis=0), rtol=1e-12)
    close(m2, np.square(x64 - x64.mean(axis=0)).sum(axis=0), rtol=1e-4)
    t = {k: be.array(v) for k, v in dict(x=x, gamma=gamma, beta=beta).items()}
    tmean = be.array(mean.reshape(1, C))
    tinv = be.array((1.0 / np.sqrt(m2 / M + eps)).reshape(1, C))
    y, xhat = be.empty((M, C)), be.empty((M, C))
    be.batchnorm_apply(t["x"], t["gamma"], t["beta"], y, xhat, tmean, tinv, relu=relu)
    xh = (x64 - mean) / np.sqrt(m2 / M + eps)
    want = gamma * xh + beta
    close(xhat.get(), xh, rtol=1e-3, atol=1e-3)
    close(y.get(), np.maximum(want, 0) if relu else want, rtol=1e-3, atol=1e-3)
    y2, xhat2 = be.empty((M, C)), be.empty((M, C))
    be.batchnorm_fprop(t["x"], t["gamma"], t["beta"], y2, xhat2, be.empty((1, C)),
                       be.empty((1, C)), tmean, be.array((m2 / M).reshape(1, C)), eps=eps,
                       inference=True, relu=relu)
    close(y.get(), y2.get(), rtol=1e-5, atol=1e-5)


def _numeric_vjp(f, x, dy, eps=1e-6):
    """Central-difference d(sum(dy * f(x)))/dx in float64."""
    x = x.astype(np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        plus = np.sum(dy * f(x))
        x[i] = old - eps
        minus = np.sum(dy * f(x))
        x[i] = old
        grad[i] = (plus - minus) / (2 * eps)
    return grad


def test_layernorm_fprop_bprop(be):
    M, D, eps = 5, 6, 1e-5
    x, gamma, beta = rand(M, D, seed=35) * 3 + 1, rand(1, D, seed=36), rand(1, D, seed=37)
    y, xhat, invstd = be.empty((M, D)), be.empty((M, D)), be.empty((M, 1))
    tgamma = be.array(gamma)
    be.layernorm_fprop(be.array(x), tgamma, be.array(beta), y, xhat, invstd, eps=eps)

    def ln(v):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps)
    close(y.get(), gamma * ln(x) + beta, rtol=1e-4)
    close(invstd.get(), 1 / np.sqrt(x.var(-1, keepdims=True) + eps), rtol=1e-4)
    dy = rand(M, D, seed=38)
    dx, dgamma, dbeta = be.empty((M, D)), be.zeros((1, D)), be.zeros((1, D))
    be.layernorm_bprop(be.array(dy), xhat, invstd, tgamma, dx, dgamma, dbeta)
    close(dx.get(), _numeric_vjp(lambda v: gamma * ln(v), x, dy), rtol=1e-3, atol=1e-4)
    close(dgamma.get(), (dy * ln(x)).sum(0, keepdims=True), rtol=1e-4)
    close(dbeta.get(), dy.sum(0, keepdims=True), rtol=1e-4)
    residual = rand(M, D, seed=34)
    joined, dgamma2, dbeta2 = be.empty((M, D)), be.zeros((1, D)), be.zeros((1, D))
    be.layernorm_bprop(be.array(dy), xhat, invstd, tgamma, joined, dgamma2, dbeta2,
                       residual=be.array(residual))
    close(joined.get(), dx.get() + residual, rtol=1e-4, atol=1e-5)
    close(dgamma2.get(), dgamma.get(), rtol=1e-4)
    close(dbeta2.get(), dbeta.get(), rtol=1e-4)
    part = rand(M, D, seed=33)
    total, y2, xhat2, invstd2 = be.empty((M, D)), be.empty((M, D)), be.empty((M, D)), \
        be.empty((M, 1))
    be.layernorm_fprop(be.array(x - part), tgamma, be.array(beta), y2, xhat2, invstd2,
                       eps=eps, residual=be.array(part), total=total)
    close(total.get(), x, rtol=1e-5, atol=1e-5)
    close(y2.get(), gamma * ln(x) + beta, rtol=1e-4, atol=1e-5)
    # inference: no xhat kept, plain and joined
    for residual in (None, part):
        y3, invstd3, total3 = be.empty((M, D)), be.empty((M, 1)), be.empty((M, D))
        joined = {} if residual is None else {"residual": be.array(residual), "total": total3}
        be.layernorm_fprop(be.array(x if residual is None else x - part), tgamma,
                           be.array(beta), y3, None, invstd3, eps=eps, **joined)
        close(y3.get(), gamma * ln(x) + beta, rtol=1e-4, atol=1e-5)
        close(invstd3.get(), invstd.get(), rtol=1e-4)


def test_softmax_is_stable_for_large_logits(be):
    x = rand(4, 7, seed=39) * 5
    x[0] += 1000.0
    out = be.empty((4, 7))
    be.softmax(be.array(x), out)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    close(out.get(), e / e.sum(axis=1, keepdims=True))
    assert np.all(np.isfinite(out.get()))


def test_softmax_cross_entropy(be):
    M, K = 6, 5
    logits = rand(M, K, seed=40) * 3
    logits[1] += 500.0
    targets = np.eye(K, dtype=np.float32)[np.arange(M) % K]
    targets[2] = [0.1, 0.2, 0.3, 0.4, 0.0]
    probs, grad = be.empty((M, K)), be.empty((M, K))
    loss = be.softmax_cross_entropy(be.array(logits), be.array(targets), probs, grad,
                                    scale=1.0 / M)
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    assert isinstance(loss, float)
    close(loss, -np.sum(targets * logp), rtol=1e-5)
    close(probs.get(), np.exp(logp))
    close(grad.get(), (np.exp(logp) - targets) / M)


# ---- bfloat16 conversion, erf, randomness -------------------------------------------------------
def _bf16_value(bits):
    """The exact value of bfloat16 pattern ``bits`` in float64, reading the all-ones exponent as
    an ordinary one (2**128 for 0x7F80), as IEEE rounding with an unbounded exponent does."""
    sign = -1.0 if bits & 0x8000 else 1.0
    exponent, mantissa = (bits >> 7) & 0xFF, bits & 0x7F
    if exponent == 0:
        return sign * 2.0 ** -126 * (mantissa / 128)
    return sign * 2.0 ** (exponent - 127) * (1 + mantissa / 128)


def _bf16_reference(x):
    """Each float32 rounded to the nearest bfloat16 (ties to even) by exact float64 arithmetic;
    None for NaN."""
    out = []
    for v in np.asarray(x, dtype=np.float32).ravel():
        bits = int(np.float32(v).view(np.uint32))
        lo = bits >> 16
        if np.isnan(v) or np.isinf(v) or bits & 0xFFFF == 0:
            out.append(None if np.isnan(v) else lo)
            continue
        dlo = abs(float(v) - _bf16_value(lo))
        dhi = abs(_bf16_value(lo + 1) - float(v))
        out.append(lo if dlo < dhi or (dlo == dhi and lo % 2 == 0) else lo + 1)
    return out


def test_f32_to_bf16_round_to_nearest_even(be):
    specials = [1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20, -(1.0 + 2 ** -8),
                -(1.0 + 3 * 2 ** -8), 0.0, -0.0, 1e-40, np.finfo(np.float32).max, np.inf,
                -np.inf, np.nan, 3.0e38]
    x = np.concatenate([np.array(specials, dtype=np.float32),
                        np.random.default_rng(41).normal(size=200).astype(np.float32) * 100])
    x = np.concatenate([x, np.array([np.uint32(0x7F800001).view(np.float32)])])
    tx, bits = be.array(x), be.empty(x.shape, dtype=np.uint16)
    bits[:] = be.f32_to_bf16(tx)
    assert bits.dtype == np.uint16
    got = bits.get()
    want = _bf16_reference(x)
    for value, g, w in zip(x, got, want):
        if w is None:
            assert (g & 0x7F80) == 0x7F80 and (g & 0x7F) != 0, f"NaN must stay NaN, got {g:#06x}"
        else:
            assert g == w, f"{value!r}: got {g:#06x}, expected {w:#06x}"
    assert got[0] == 0x3F80 and got[1] == 0x3F80 and got[2] == 0x3F82 and got[3] == 0x3F81
    assert got[4] == 0xBF80 and got[5] == 0xBF82 and got[7] == 0x8000
    assert got[10] == 0x7F80 and got[11] == 0xFF80
    assert got[9] == 0x7F80, "the largest float32 rounds up to +inf in bfloat16"


def test_bf16_to_f32_widens_exactly(be):
    all_bits = np.arange(0, 0x10000, 97, dtype=np.uint16)
    tb, out = be.array(all_bits, dtype=np.uint16), be.empty(all_bits.shape, dtype=np.float32)
    out[:] = be.bf16_to_f32(tb)
    want = (all_bits.astype(np.uint32) << 16).view(np.float32)
    got = out.get()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
    back = be.empty(all_bits.shape, dtype=np.uint16)
    back[:] = be.f32_to_bf16(out)
    assert np.array_equal(back.get()[ok], all_bits[ok]), "bf16 -> f32 -> bf16 is the identity"


def test_erf(be):
    """Within the Abramowitz-Stegun bound 1.5e-7 plus half a float32 ulp at 1 (2**-25)."""
    x = np.concatenate([np.linspace(-4, 4, 81), [0.0, 1e-4, -1e-4, 6.0, -6.0]]).astype(np.float32)
    out = be.empty(x.shape)
    out[:] = be.erf(be.array(x))
    close(out.get(), [math.erf(float(v)) for v in x], rtol=0, atol=1.5e-7 + 2.0 ** -25)


def test_erf_is_exact_in_float64():
    be = neonlite.gen_backend("cpu", batch_size=1, datatype=np.float64)
    x = np.linspace(-3, 3, 61)
    out = be.empty(x.shape)
    out[:] = be.erf(be.array(x))
    np.testing.assert_allclose(out.get(), [math.erf(v) for v in x], rtol=1e-15, atol=1e-16)


def test_uniform_and_dropout_mask(be):
    u = be.empty((200, 50))
    be.uniform(u, low=-2.0, high=3.0)
    v = u.get()
    assert v.min() >= -2.0 and v.max() < 3.0 and abs(v.mean() - 0.5) < 0.1
    mask = be.empty((200, 50))
    be.dropout_mask(mask, keep=0.7)
    m = mask.get()
    assert set(np.unique(m).tolist()) <= {0.0, np.float32(1 / 0.7)}
    assert abs((m > 0).mean() - 0.7) < 0.02


def test_example_dropout_mask_is_the_per_example_philox_stream(be):
    """Bit for bit philox.example_masks on every backend, rows addressed by global example
    (a batch split at any row gives the same masks), and a different step or stream differs."""
    from neonlite.backends.philox import example_masks
    mask = be.empty((6, 3, 7))
    be.example_dropout_mask(mask, 0.6, key=2**40 + 5, step=3, stream=11, first=2**33)
    want = example_masks((6, 3, 7), 0.6, 2**40 + 5, 3, 11, 2**33).astype(np.float32)
    np.testing.assert_array_equal(mask.get(), want)
    assert set(np.unique(want).tolist()) == {0.0, np.float32(1 / 0.6)}
    tail = be.empty((4, 21))
    be.example_dropout_mask(tail, 0.6, key=2**40 + 5, step=3, stream=11, first=2**33 + 2)
    np.testing.assert_array_equal(tail.get(), want[2:].reshape(4, 21))
    heads = be.empty((12, 3, 7))
    be.example_dropout_mask(heads, 0.6, key=2**40 + 5, step=3, stream=11, first=2**33,
                            examples=6)
    np.testing.assert_array_equal(heads.get().reshape(6, 42),
                                  example_masks((6, 42), 0.6, 2**40 + 5, 3, 11, 2**33)
                                  .astype(np.float32))
    other = be.empty((6, 3, 7))
    be.example_dropout_mask(other, 0.6, key=2**40 + 5, step=4, stream=11, first=2**33)
    assert not np.array_equal(other.get(), want)
