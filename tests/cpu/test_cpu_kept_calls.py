"""Calls the CPU backend keeps by their operands' identities: a tensor's reshapes are made once
per shape (and again once its storage is rebound, as an optimizer arena does); the GEMMs of
kept operands are prepared once, and follow new values, scales, rebound storage and beta with
an overlapping output; so do the kernel calls kept on kept tensors (layer norm, GELU, bias
rows); slices are not kept, so per-call slices fill no table."""
import numpy as np
import pytest

from support.harness import make_backend


def test_a_reshape_is_kept_per_shape_until_the_storage_changes():
    be = make_backend("cpu", dtype=np.float32)
    t = be.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    flat = t.reshape(6, 4)
    assert t.reshape((6, 4)) is flat and t.reshape(6, 4) is flat and flat.kept
    assert t.reshape(4, 6) is not flat
    t._ary = np.zeros((2, 3, 4), np.float32)  # what the arena does to a parameter
    again = t.reshape(6, 4)
    assert again is not flat and np.shares_memory(again._ary, t._ary)
    assert not t[0].kept and not t.T.kept and not t[0].reshape(12).kept
    with pytest.raises(ValueError, match="would copy"):
        t.T.reshape(24)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kept_gemm_calls_follow_values_scales_and_rebound_storage(dtype):
    be = make_backend("cpu", dtype=dtype)
    if not hasattr(be.kernels.gemm, "prepare"):
        pytest.skip("the GEMMs run without MKL here: no prepared calls")
    rng = np.random.default_rng(7)
    A, B, C = be.zeros((40, 30)), be.zeros((50, 30)), be.zeros((40, 50))
    before = len(be._gemm_calls)
    for step in range(3):
        a, b, c = (rng.standard_normal(s) for s in ((40, 30), (50, 30), (40, 50)))
        A.set(a), B.set(b), C.set(c)
        alpha, beta = 0.5 + step, (0.0, 1.0, -2.0)[step]
        be.compound_dot(A, B, C, alpha=alpha, beta=beta, transB=True)
        np.testing.assert_allclose(C.get(), alpha * a @ b.T + beta * c, rtol=1e-5, atol=1e-5)
    assert len(be._gemm_calls) == before + 1
    B._ary = np.asarray(rng.standard_normal((50, 30)), dtype)  # rebound, as by an arena
    be.compound_dot(A, B, C, transB=True)
    np.testing.assert_allclose(C.get(), A.get() @ B.get().T, rtol=1e-5, atol=1e-5)


def test_a_kept_gemm_onto_an_overlapping_output_with_beta_takes_the_buffered_path():
    """C = X @ C + C: the product must read C's old values, so it goes through the backend's
    product buffer each time, the kept call notwithstanding."""
    be = make_backend("cpu", dtype=np.float64)
    rng = np.random.default_rng(8)
    M, X = be.array(rng.standard_normal((20, 20))), be.array(rng.standard_normal((20, 20)))
    for _ in range(3):
        old = M.get()
        be.compound_dot(X, M, M, beta=1.0)
        np.testing.assert_allclose(M.get(), X.get() @ old + old, rtol=1e-12)


def test_slices_fill_no_table():
    be = make_backend("cpu", dtype=np.float32)
    h = be.array(np.ones((8, 16, 32), np.float32))
    W, out = be.array(np.ones((32, 32), np.float32)), be.zeros((8, 32))
    before = len(be._gemm_calls)
    for t in range(16):
        be.compound_dot(h[:, t], W, out)
    assert len(be._gemm_calls) == before
    np.testing.assert_array_equal(out.get(), np.full((8, 32), 32.0))


def test_kept_kernel_calls_follow_values_and_rebound_storage():
    """Layer norm, GELU (with its bias gradient) and bias rows on kept tensors are kept calls;
    new values and a rebound parameter array give what the numpy reference gives, and slices
    keep no call."""
    from neonlite.backends.reference import norm as reference
    be = make_backend("cpu", dtype=np.float64)
    if be.kernels.module("norm", np.dtype(np.float64)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(9)
    M, D = 40, 24
    x, y, xhat, invstd = be.zeros((M, D)), be.zeros((M, D)), be.zeros((M, D)), be.zeros((M, 1))
    gamma, beta, b, grad = be.zeros((1, D)), be.zeros((1, D)), be.zeros(D), be.zeros(D)
    pre, out, dx = be.zeros((M, D)), be.zeros((M, D)), be.zeros((M, D))
    before = len(be.kernels._kept_calls)
    for step in range(3):
        if step == 2:
            gamma._ary = np.asarray(rng.standard_normal((1, D)))  # as an arena rebinds it
        for t in (x, gamma, beta, b, grad):
            t.set(rng.standard_normal(t.shape))
        be.layernorm_fprop(x, gamma, beta, y, xhat, invstd)
        want = [np.zeros((M, D)), np.zeros((M, D)), np.zeros((M, 1))]
        reference.layernorm_fprop(x.get(), gamma.get(), beta.get(), *want, eps=1e-5)
        np.testing.assert_allclose(y.get(), want[0], rtol=1e-10, atol=1e-12)
        pre[:] = x + b
        np.testing.assert_array_equal(pre.get(), x.get() + b.get())
        be.gelu(pre, out)
        g0 = grad.get()
        be.gelu_bprop(pre, out, dx, grad)
        np.testing.assert_allclose(grad.get(), g0 + dx.get().sum(axis=0), rtol=1e-12)
    assert len(be.kernels._kept_calls) == before + 5  # four calls, and layer norm on a new gamma
    be.gelu(pre[:20], out[:20])
    assert len(be.kernels._kept_calls) == before + 5


def test_kept_calls_keep_no_array_alive():
    """A kept call holds weak references: the arrays of a dropped model's buffers are freed."""
    import gc
    import weakref
    be = make_backend("cpu", dtype=np.float32)
    rng = np.random.default_rng(10)
    A, B, C = (be.array(rng.standard_normal(s)) for s in ((30, 40), (40, 20), (30, 20)))
    x, y, xhat, invstd = be.array(rng.standard_normal((30, 20))), be.zeros((30, 20)), \
        be.zeros((30, 20)), be.zeros((30, 1))
    gamma, beta = be.ones((1, 20)), be.zeros((1, 20))
    for _ in range(2):
        be.compound_dot(A, B, C)
        be.layernorm_fprop(C, gamma, beta, y, xhat, invstd)
        be.gelu(y, x)
    refs = [weakref.ref(t._ary) for t in (A, B, C, y, xhat, x)]
    del A, B, C, x, y, xhat
    gc.collect()
    assert all(r() is None for r in refs)


def test_kept_plan_calls_follow_values_plans_and_thread_counts():
    """A block-sparse op on kept tensors (a row whose kernel takes its plan's arguments) is a
    kept call, under the plan's identity and the OpenMP thread count (which sizes the pack
    buffer the call holds): new values give the reference's results, another plan or thread
    count prepares a new call, and a dropped plan is freed."""
    import gc
    import weakref
    from neonlite.backends.reference import blocksparse as reference
    be = make_backend("cpu", dtype=np.float64)
    if be.kernels.module("blocksparse", np.dtype(np.float64)) is None:
        pytest.skip(f"no compiled CPU kernels: {be.kernels.unavailable_reason()}")
    rng = np.random.default_rng(11)
    layout = np.array([[1, 0, 1], [0, 1, 1]], np.uint8)
    plan = be.blocksparse_layer(layout, 8)
    x, w, y = be.zeros((5, 16)), be.zeros((4, 8, 8)), be.zeros((5, 24))
    before = len(be.kernels._kept_calls)
    for _ in range(3):
        x.set(rng.standard_normal((5, 16)))
        w.set(rng.standard_normal((4, 8, 8)))
        be.blocksparse_fprop(plan, x, w, y)
        want = reference.linear_fprop(plan.tables, x.get(), w.get(), 8)
        np.testing.assert_allclose(y.get(), want, rtol=1e-12, atol=1e-12)
    assert len(be.kernels._kept_calls) == before + 1
    other = be.blocksparse_layer(np.ones((2, 3), np.uint8), 8)
    w6 = be.array(rng.standard_normal((6, 8, 8)))
    be.blocksparse_fprop(other, x, w6, y)
    np.testing.assert_allclose(y.get(), reference.linear_fprop(other.tables, x.get(),
                                                               w6.get(), 8), rtol=1e-12)
    assert len(be.kernels._kept_calls) == before + 2
    threads = be.kernels.module("blocksparse", np.dtype(np.float64)).lib.bs_threads()
    be.set_threads(threads + 1)
    try:
        be.blocksparse_fprop(plan, x, w, y)
        assert len(be.kernels._kept_calls) == before + 3
    finally:
        be.set_threads(threads)
    np.testing.assert_allclose(y.get(), reference.linear_fprop(plan.tables, x.get(), w.get(),
                                                               8), rtol=1e-12)
    gone = weakref.ref(other)
    del other
    gc.collect()
    assert gone() is None


def test_forget_prepared_drops_what_calls_keep_and_calls_still_agree():
    """``forget_prepared`` empties the prepared attention calls and visit tables, the GEMM
    calls and the kernels' workspaces; the next calls prepare them again, with equal
    results."""
    be = make_backend("cpu", dtype=np.float64)
    rng = np.random.default_rng(3)
    q, k, v = (be.array(rng.standard_normal((2, 8, 16))) for _ in range(3))
    out, lse = be.zeros((2, 8, 16)), be.zeros((2, 8))
    a, b, c = be.array(rng.standard_normal((8, 16))), be.array(rng.standard_normal((16, 8))), \
        be.zeros((8, 8))
    for array in (q, k, v, out, lse, a, b, c):
        be.keep(array)

    def run():
        be.attention(q, k, v, out, lse, 0.25, True)
        be.compound_dot(a, b, c)
        return out.get().copy(), c.get().copy()

    first = run()
    sections = list(be._sections.values())
    assert any(len(s.kept._table) for s in sections) and len(be._gemm_calls._table)
    be.forget_prepared()
    assert not any(len(s.kept._table) or s._attention_plain for s in sections)
    assert not len(be._gemm_calls._table) and not be.kernels.workspaces
    again = run()
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
