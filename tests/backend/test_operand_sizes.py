"""The row-wise kernels (batch norm, layer norm, GELU, the fused softmax + cross-entropy) take
their sizes from x and trust every other operand, so an operand of another size is one
ValueError naming the op, the operand and both sizes, raised before anything is written: on
the CPU backend (where the C kernels wrote past the buffers and aborted Python) and on the GPU
backend's own code over the host emulator (compiled and emulated, not run on a GPU)."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite

M, D = 12, 8


def _cases(be):
    """(op, bad operand's name, call) with one misshaped operand each; the calls' outputs are
    returned for the nothing-written check."""
    rng = np.random.default_rng(0)
    r = lambda *s: be.array(rng.normal(size=s).astype(np.float32))  # noqa: E731
    z = lambda *s: be.zeros(s)  # noqa: E731
    return [
        ("layernorm_fprop", "y", lambda o: be.layernorm_fprop(r(M, D), r(1, D), r(1, D), o,
                                                              z(M, D), z(M, 1)), (M // 2, D)),
        ("layernorm_fprop", "invstd", lambda o: be.layernorm_fprop(r(M, D), r(1, D), r(1, D),
                                                                   z(M, D), z(M, D), o), (2, 1)),
        ("layernorm_fprop", "gamma", lambda o: be.layernorm_fprop(r(M, D), o, r(1, D), z(M, D),
                                                                  z(M, D), z(M, 1)), (1, 3)),
        ("layernorm_bprop", "dx", lambda o: be.layernorm_bprop(r(M, D), r(M, D), r(M, 1),
                                                               r(1, D), o, z(1, D), z(1, D)),
         (2, D)),
        ("layernorm_bprop", "dgamma", lambda o: be.layernorm_bprop(r(M, D), r(M, D), r(M, 1),
                                                                   r(1, D), z(M, D), o, z(1, D)),
         (1, D + 1)),
        ("batchnorm_fprop", "y", lambda o: be.batchnorm_fprop(r(M, D), r(D), r(D), o, z(M, D),
                                                              z(D), z(D), z(D), z(D)), (M, 2)),
        ("batchnorm_fprop", "gamma", lambda o: be.batchnorm_fprop(r(M, D), o, r(D), z(M, D),
                                                                  z(M, D), z(D), z(D), z(D),
                                                                  z(D)), (2,)),
        ("batchnorm_bprop", "dx", lambda o: be.batchnorm_bprop(r(M, D), r(M, D), r(D), r(D), o,
                                                               z(D), z(D)), (M - 1, D)),
        ("softmax_cross_entropy", "probs", lambda o: be.softmax_cross_entropy(
            r(M, D), r(M, D), o, z(M, D)), (2, D)),
        ("softmax_cross_entropy", "grad", lambda o: be.softmax_cross_entropy(
            r(M, D), r(M, D), z(M, D), o), (M, D + 2)),
    ]


def _check(be):
    for op, name, call, bad_shape in _cases(be):
        bad = be.zeros(bad_shape)
        with pytest.raises(ValueError, match=rf"^{op}: {name} has {int(np.prod(bad_shape))} "
                                             rf"elements .*; expected"):
            call(bad)
        assert not np.any(bad.get()), f"{op} wrote into the misshaped {name}"


def test_cpu_refuses_misshaped_operands():
    _check(neonlite.gen_backend("cpu", batch_size=4, rng_seed=0))


def test_cpu_gelu_refuses_misshaped_operands():
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    x = be.array(np.ones((M, D), np.float32))
    with pytest.raises(ValueError, match=r"^gelu: out has 16 elements"):
        be.gelu(x, be.zeros((2, D)))
    with pytest.raises(ValueError, match=r"^gelu_bprop: dbias has 2 elements .*expected 8, one "
                                         r"per column"):
        be.gelu_bprop(x, x, be.zeros((M, D)), dbias=be.zeros((2,)))


@requires("emulator")
def test_gpu_backend_refuses_misshaped_operands(monkeypatch):
    _check(host_gpu_backend(monkeypatch))


def test_matching_operands_of_other_shapes_are_taken():
    """Only element counts matter: gamma (D,) or (1, D), invstd (M,) or (M, 1)."""
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(M, D))
    y, xhat, invstd = be.zeros((M, D)), be.zeros((M, D)), be.zeros((M,))
    be.layernorm_fprop(be.array(x), be.array(np.ones(D)), be.array(np.zeros(D)), y, xhat, invstd)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.get(), want, rtol=1e-10, atol=1e-10)
