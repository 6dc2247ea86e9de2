"""Block-sparse causal self-attention at T=4096 (one sequence, d_model 256, 4 heads of 64,
64-token blocks): a local(256 tokens) + strided(every 4th block) layout, fprop + bprop of the
``BlockSparseAttention`` layer (the fused attention op visiting the layout's tiles), against
the dense causal ``MultiHeadAttention`` layer in neonlite (``neonlite_dense``), the unfused
block-sparse attention the layer ran before (``neonlite_bs_unfused``: sampled scores (N, nnz,
bs, bs), block-sparse softmax, sparse x dense products) and PyTorch's causal
``scaled_dot_product_attention`` with the same projections.  Smoke mode: T=128, d_model 32,
2 heads, 16-token blocks.  Figure: ms per step; the note gives the score/probability buffers
of each and the unfused / fused time."""
import numpy as np

from .common import torch_threads

NAME = "bs_attention"
FIGURE = "ms"
_NOTES = {}


def _sizes(smoke):
    """(T, d_model, heads, block size, local window in blocks, stride in blocks)."""
    return (128, 32, 2, 16, 2, 4) if smoke else (4096, 256, 4, 64, 4, 4)


def _layout(smoke):
    T, _, _, bs, window, stride = _sizes(smoke)
    return {"local": {"window": window, "causal": True},
            "strided": {"stride": stride, "causal": True}}


def _step(be, layer, T, d):
    from neonlite.layers import Sequential
    net = Sequential([layer])
    net.name_children()
    net.configure((T, d))
    net.set_needs_deltas(True)
    net.allocate()
    rng = np.random.default_rng(0)
    x = be.array(rng.standard_normal((1, T, d)))
    e = be.array(rng.standard_normal((1, T, d)))

    def step():
        net.fprop(x)
        net.bprop(e)
    return step, net.layers[0]


def _score_bytes(layer):
    return 2 * layer.probs.size * np.dtype(layer.probs.dtype).itemsize


def _head_major_shape(tokens):
    """(N, H, T, dh) of a token-major (N, T, H, dh) view."""
    N, T, H, dh = tokens.shape
    return N, H, T, dh


def _unfused_layer(*args, **kw):
    """A BlockSparseAttention running the unfused block-sparse ops (the layer before the fused
    op): it holds the sampled scores and their gradient, (N, nnz, bs, bs) each."""
    from neonlite.layers import BlockSparseAttention

    class UnfusedBlockSparseAttention(BlockSparseAttention):
        def allocate(self):
            super().allocate()
            sparse = (self.be.bsz, self.plan.nnz, self.bs, self.bs)
            self.probs, self.dprobs = self.be.zeros(sparse), self.be.zeros(sparse)
            # the head-major (N, H, T, dh) copies the unfused ops read and write, and the
            # permutes into and out of them, as the layer ran them
            self.head_major = {name: self.be.zeros(_head_major_shape(getattr(self, name)))
                               for name in ("qh", "kh", "vh", "oh", "dqh", "dkh", "dvh", "doh")}

        def _heads(self, *names):
            for name in names:
                self.be.permute_axes(getattr(self, name), self.head_major[name], (0, 2, 1, 3))
            return [self.head_major[name] for name in names]

        def _tokens(self, *names):
            for name in names:
                self.be.permute_axes(self.head_major[name], getattr(self, name), (0, 2, 1, 3))

        def _attend(self):
            be, plan = self.be, self.plan
            q, k, v = self._heads("qh", "kh", "vh")
            o = self.head_major["oh"]
            be.blocksparse_sdd(plan, q, k, self.probs, alpha=self.scale)
            be.blocksparse_softmax(plan, self.probs, self.probs, 1.0, self.causal)
            be.blocksparse_dsd(plan, self.probs, v, o)
            self._tokens("oh")

        def _attend_bprop(self):
            be, plan, hm = self.be, self.plan, self.head_major
            (do,) = self._heads("doh")
            q, k, v = hm["qh"], hm["kh"], hm["vh"]
            be.blocksparse_dsd(plan, self.probs, do, hm["dvh"], transposed=True)
            be.blocksparse_sdd(plan, do, v, self.dprobs)
            be.blocksparse_softmax_bprop(plan, self.probs, self.dprobs, self.dprobs, self.scale)
            be.blocksparse_dsd(plan, self.dprobs, k, hm["dqh"])
            be.blocksparse_dsd(plan, self.dprobs, q, hm["dkh"], transposed=True)
            self._tokens("dqh", "dkh", "dvh")

    return UnfusedBlockSparseAttention(*args, **kw)


def neonlite(make_backend, smoke):
    from neonlite.layers import BlockSparseAttention
    T, d, heads, bs, _, _ = _sizes(smoke)
    be = make_backend(1)
    step, layer = _step(be, BlockSparseAttention(heads, _layout(smoke), bs, causal=True), T, d)
    _NOTES["sparse"] = (f"fused: no scores stored (density {layer.plan.tables.density:.3f}); "
                        f"lse {layer.lse.size * layer.lse.dtype.itemsize / 2**10:.0f} KiB")
    return step, None


def extra_contenders(make_backend, smoke):
    from neonlite.layers import MultiHeadAttention
    T, d, heads, bs, _, _ = _sizes(smoke)
    be = make_backend(1)
    dense, _ = _step(be, MultiHeadAttention(d, heads, causal=True), T, d)
    unfused, layer = _step(be, _unfused_layer(heads, _layout(smoke), bs, causal=True), T, d)
    _NOTES["unfused"] = f"unfused sparse scores {_score_bytes(layer) / 2**20:.1f} MiB"
    return {"neonlite_dense": dense, "neonlite_bs_unfused": unfused}


def note(row):
    """The score buffers of the fused and unfused block-sparse layers, unfused / fused time."""
    parts = [_NOTES[k] for k in ("sparse", "unfused") if k in _NOTES]
    if "neonlite_bs_unfused" in row:
        parts.append(f"unfused {row['neonlite_bs_unfused']:.1f} ms, unfused/fused "
                     f"{row['neonlite_bs_unfused'] / row['neonlite']:.2f}x")
    return ", ".join(parts)


def torch(device, smoke):
    torch = torch_threads()
    T, d, heads, _, _, _ = _sizes(smoke)
    proj = torch.nn.Linear(d, 3 * d).to(device)
    out = torch.nn.Linear(d, d).to(device)
    x = torch.randn(1, T, d, device=device, requires_grad=True)
    e = torch.randn(1, T, d, device=device)

    def step():
        x.grad = None
        q, k, v = proj(x).view(1, T, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out(o.transpose(1, 2).reshape(1, T, d)).backward(e)
    return step, None
