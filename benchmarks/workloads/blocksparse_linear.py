"""BlockSparseLinear 4096 -> 4096 on 4096 rows (batch x tokens), 32 x 32 blocks, a random
layout at 5%, 10%, 25% or 50% density: fprop + bprop (input error) + weight gradient, against
the dense ``Linear`` of the same shape in neonlite (``neonlite_dense``) and PyTorch's dense
x @ W with autograd (``torch``).  Smoke mode: 64 -> 64 on 32 rows, 8 x 8 blocks.
Figure: ms per step (lower is better); the note gives dense / block-sparse time."""
import numpy as np

from .common import torch_threads

DENSITIES = (0.05, 0.10, 0.25, 0.50)


def _sizes(smoke):
    """(rows, features, block size)."""
    return (32, 64, 8) if smoke else (4096, 4096, 32)


def _layer_step(be, layer, rows, features, seed=0):
    """fprop + bprop of a configured layer on fixed random data."""
    from neonlite.layers import Sequential
    net = Sequential([layer])
    net.name_children()
    net.configure((features,))
    net.set_needs_deltas(True)
    net.allocate()
    rng = np.random.default_rng(seed)
    x = be.array(rng.standard_normal((rows, features)))
    e = be.array(rng.standard_normal((rows, features)))

    def step():
        net.fprop(x)
        net.bprop(e)
    return step


class BlockSparseLinearWorkload:
    """One density's row of the table (a workload module's interface, as an object)."""

    FIGURE = "ms"

    def __init__(self, density):
        self.density = density
        self.NAME = f"bsl_{round(density * 100)}pct"

    def neonlite(self, make_backend, smoke):
        from neonlite.blocksparse import layouts
        from neonlite.layers import BlockSparseLinear
        rows, features, bs = _sizes(smoke)
        be = make_backend(rows)
        nb = features // bs
        layout = layouts.random((nb, nb), self.density, seed=0)
        return _layer_step(be, BlockSparseLinear(features, layout, bs), rows, features), None

    def extra_contenders(self, make_backend, smoke):
        from neonlite.layers import Linear
        rows, features, _ = _sizes(smoke)
        be = make_backend(rows)
        return {"neonlite_dense": _layer_step(be, Linear(features), rows, features)}

    def torch(self, device, smoke):
        torch = torch_threads()
        rows, features, _ = _sizes(smoke)
        x = torch.randn(rows, features, device=device, requires_grad=True)
        w = torch.randn(features, features, device=device, requires_grad=True)
        e = torch.randn(rows, features, device=device)

        def step():
            x.grad = w.grad = None
            (x @ w).backward(e)
        return step, None


WORKLOADS = tuple(BlockSparseLinearWorkload(d) for d in DENSITIES)


# ---- GPU (``--backend gpu``): bfloat16 storage, tensor cores ------------------------------------
class GPUBlockSparseLinear:
    """BlockSparseLinear 4096 -> 4096 on 4096 rows in bfloat16 with ``bs`` x ``bs`` blocks at
    ``density``: fprop + bprop + weight gradient through the backend ops, against cuBLAS dense
    bf16 in neonlite (``neonlite_dense``), PyTorch dense bf16 (``torch``) and, where PyTorch has
    it, ``torch.sparse`` BSR matmul of the same layout (``torch_bsr``, fprop only: the note says
    so).  Smoke mode: 256 -> 256 on 256 rows."""

    FIGURE = "ms"

    def __init__(self, density, bs):
        self.density, self.bs = density, bs
        self.NAME = f"bsl_bf16_b{bs}_{round(density * 100)}pct"
        self._notes = {}

    def _shapes(self, smoke):
        n = 256 if smoke else 4096
        return n, n, self.bs

    def _layout(self, smoke):
        from neonlite.blocksparse import layouts
        rows, features, bs = self._shapes(smoke)
        return layouts.random((features // bs, features // bs), self.density, seed=0)

    def neonlite(self, make_backend, smoke):
        rows, features, bs = self._shapes(smoke)
        be = make_backend(rows)
        plan = be.blocksparse_layer(self._layout(smoke), bs)
        rng = np.random.default_rng(0)
        x = be.array(rng.standard_normal((rows, features)), dtype="bf16")
        e = be.array(rng.standard_normal((rows, features)), dtype="bf16")
        w = be.array(0.02 * rng.standard_normal((plan.nnz, bs, bs)), dtype="bf16")
        y, dx = be.empty((rows, features), dtype="bf16"), be.empty((rows, features), dtype="bf16")
        dw = be.empty(w.shape, dtype="bf16")

        def step():
            be.blocksparse_fprop(plan, x, w, y)
            be.blocksparse_bprop(plan, e, w, dx)
            be.blocksparse_update(plan, x, e, dw)
        return step, None

    def extra_contenders(self, make_backend, smoke):
        rows, features, _ = self._shapes(smoke)
        be = make_backend(rows)
        rng = np.random.default_rng(0)
        x, e, w = (be.array(rng.standard_normal(s), dtype="bf16")
                   for s in ((rows, features), (rows, features), (features, features)))
        y, dx, dw = (be.empty(s, dtype="bf16")
                     for s in ((rows, features), (rows, features), (features, features)))

        def dense():
            be.compound_dot(x, w, y)
            be.compound_dot(e, w, dx, transB=True)
            be.compound_dot(x, e, dw, transA=True)
        contenders = {"neonlite_dense": dense}
        bsr = self._torch_bsr(smoke)
        if bsr is not None:
            contenders["torch_bsr"] = bsr
        return contenders

    def _torch_bsr(self, smoke):
        """PyTorch's BSR x dense product of the same layout (fprop), or None where PyTorch or
        its BSR kernels for bfloat16 on CUDA are missing (the reason goes in the note)."""
        try:
            import torch
            rows, features, bs = self._shapes(smoke)
            mask = torch.from_numpy(np.kron(self._layout(smoke), np.ones((bs, bs)))).cuda()
            w = (torch.randn(features, features, device="cuda") * mask).to(torch.bfloat16)
            w_bsr = w.t().contiguous().to_sparse_bsr((bs, bs))
            x = torch.randn(rows, features, device="cuda", dtype=torch.bfloat16)
            torch.sparse.mm(w_bsr, x.t())
        except Exception as err:  # noqa: BLE001 - any failure means "not available here"
            self._notes["bsr"] = f"torch BSR unavailable: {type(err).__name__}"
            return None
        self._notes["bsr"] = "torch_bsr is fprop only"
        return lambda: torch.sparse.mm(w_bsr, x.t())

    def torch(self, device, smoke):
        import torch
        rows, features, _ = self._shapes(smoke)
        x = torch.randn(rows, features, device=device, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(features, features, device=device, dtype=torch.bfloat16,
                        requires_grad=True)
        e = torch.randn(rows, features, device=device, dtype=torch.bfloat16)

        def step():
            x.grad = w.grad = None
            (x @ w).backward(e)
        return step, None

    def note(self, row):
        parts = [self._notes.get("bsr", "")]
        if "torch_bsr" in row:
            parts.append(f"torch BSR fprop {row['torch_bsr']:.2f} ms")
        return "; ".join(p for p in parts if p)


GPU_WORKLOADS = tuple(GPUBlockSparseLinear(d, bs) for bs in (32, 64) for d in DENSITIES)
