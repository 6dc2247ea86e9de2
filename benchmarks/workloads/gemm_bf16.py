"""bf16 GEMM on the CPU: bf16 operands, float32 results.  Figure: GFLOP/s.

Three rows: ``gemm_bf16`` (1024 x 1024 @ 1024 x 1024), ``gemm_bf16_d512`` (the Linear
products of one training step of a d_model-512 transformer block at T 128, batch 16: 2048
tokens through 512 -> 512, 512 -> 2048 and 2048 -> 512, each forward X W, input gradient
dY W^T and weight gradient X^T dY) and ``gemm_bf16_d128`` (the same for nanoGPT's CPU recipe,
d_model 128 at T 64, batch 12: 768 tokens through 128 -> 128, 128 -> 512 and 512 -> 128).
Contenders: ``neonlite`` (``be.dot_bf16`` by the path this machine chose, ``neonlite doctor``
says which), ``neonlite_compute`` (bf16 arithmetic, where this CPU has a bf16 kernel),
``neonlite_storage`` (float32 arithmetic on bf16 operands), ``neonlite_f32`` (this project's
float32 GEMM, ``compound_dot``, on float32 operands) and ``torch`` (``torch.matmul`` in
bfloat16).
"""
from .common import torch_threads

#: (tokens, d_model, d_ff) of the transformer rows
SIZES = {"gemm_bf16_d512": (2048, 512, 2048), "gemm_bf16_d128": (768, 128, 512)}


def _products(name, smoke):
    """[(m, k, n, transA, transB)] of the row: op(A) (m, k) @ op(B) (k, n)."""
    if smoke:
        return [(33, 17, 29, False, False), (33, 29, 17, False, True),
                (17, 33, 29, True, False)]
    if name == "gemm_bf16":
        return [(1024, 1024, 1024, False, False)]
    tokens, d_model, d_ff = SIZES[name]
    products = []
    for nin, nout in ((d_model, d_model), (d_model, d_ff), (d_ff, d_model)):
        products += [(tokens, nin, nout, False, False),   # Y = X W
                     (tokens, nout, nin, False, True),    # dX = dY W^T
                     (nin, tokens, nout, True, False)]    # dW = X^T dY
    return products


def _operand_shapes(m, k, n, trans_a, trans_b):
    return ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))


class GemmBf16:
    """One row (see the module docstring): ``name`` picks its products."""
    FIGURE = "GFLOP/s"

    def __init__(self, name):
        self.NAME = name

    def _work(self, smoke):
        return sum(2.0 * m * k * n for m, k, n, _, _ in _products(self.NAME, smoke)) / 1e9

    def _neonlite_step(self, make_backend, smoke, path=None, float32=False):
        import numpy as np
        be = make_backend(16)
        rng = np.random.default_rng(0)
        calls = []
        for m, k, n, ta, tb in _products(self.NAME, smoke):
            a_shape, b_shape = _operand_shapes(m, k, n, ta, tb)
            a = rng.standard_normal(a_shape, dtype=np.float32)
            b = rng.standard_normal(b_shape, dtype=np.float32)
            c = np.empty((m, n), np.float32)
            if float32:
                ta_, tb_, tc = be.array(a), be.array(b), be.array(c)
                calls.append(lambda a=ta_, b=tb_, c=tc, ta=ta, tb=tb:
                             be.compound_dot(a, b, c, transA=ta, transB=tb))
            else:
                abits, bbits = be.to_bf16(a), be.to_bf16(b)
                calls.append(lambda a=abits, b=bbits, c=c, ta=ta, tb=tb:
                             be.dot_bf16(a, b, c, transA=ta, transB=tb, path=path))

        def step():
            for call in calls:
                call()
        return step

    def neonlite(self, make_backend, smoke):
        return self._neonlite_step(make_backend, smoke), self._work(smoke)

    def extra_contenders(self, make_backend, smoke):
        from neonlite.backends.cpu.bf16_kernels import gemm_module
        be = make_backend(16)
        found = {"neonlite_storage": self._neonlite_step(make_backend, smoke, "storage"),
                 "neonlite_f32": self._neonlite_step(make_backend, smoke, float32=True)}
        if gemm_module(be.kernels)[0] is not None:
            found["neonlite_compute"] = self._neonlite_step(make_backend, smoke, "compute")
        return found

    def torch(self, device, smoke):
        torch = torch_threads()
        calls = []
        for m, k, n, ta, tb in _products(self.NAME, smoke):
            a_shape, b_shape = _operand_shapes(m, k, n, ta, tb)
            a = torch.randn(*a_shape, device=device, dtype=torch.bfloat16)
            b = torch.randn(*b_shape, device=device, dtype=torch.bfloat16)
            calls.append(lambda a=a, b=b, ta=ta, tb=tb:
                         torch.matmul(a.t() if ta else a, b.t() if tb else b))

        def step():
            for call in calls:
                call()
        return step, self._work(smoke)

    def note(self, row):
        from neonlite import get_backend
        parts = [f"path {get_backend().bf16_path('gemm')}"]
        for name in ("neonlite_compute", "neonlite_storage", "neonlite_f32"):
            if name in row:
                parts.append(f"{name.split('_', 1)[1]} {row[name]:.1f}")
        if "neonlite_compute" in row and "neonlite_f32" in row:
            parts.append(f"compute/f32 {row['neonlite_compute'] / row['neonlite_f32']:.2f}x")
        return "; ".join(parts) + " GFLOP/s"


WORKLOADS = (GemmBf16("gemm_bf16"), GemmBf16("gemm_bf16_d512"), GemmBf16("gemm_bf16_d128"))
