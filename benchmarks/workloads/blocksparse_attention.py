"""Block-sparse causal self-attention at T=4096 (one sequence, d_model 256, 4 heads of 64,
64-token blocks): a local(256 tokens) + strided(every 4th block) layout, fprop + bprop of the
``BlockSparseAttention`` layer, against the dense causal ``MultiHeadAttention`` layer in
neonlite (``neonlite_dense``) and PyTorch's causal ``scaled_dot_product_attention`` with the
same projections.  Smoke mode: T=128, d_model 32, 2 heads, 16-token blocks.  Figure: ms per
step; the note gives the score/probability buffers of each and dense / sparse time."""
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


def neonlite(make_backend, smoke):
    from neonlite.layers import BlockSparseAttention
    T, d, heads, bs, _, _ = _sizes(smoke)
    be = make_backend(1)
    step, layer = _step(be, BlockSparseAttention(heads, _layout(smoke), bs, causal=True), T, d)
    _NOTES["sparse"] = (f"scores {_score_bytes(layer) / 2**20:.1f} MiB (density "
                        f"{layer.plan.tables.density:.3f})")
    return step, None


def extra_contenders(make_backend, smoke):
    from neonlite.layers import MultiHeadAttention
    T, d, heads, _, _, _ = _sizes(smoke)
    be = make_backend(1)
    step, layer = _step(be, MultiHeadAttention(d, heads, causal=True), T, d)
    _NOTES["dense"] = f"dense {_score_bytes(layer) / 2**20:.1f} MiB"
    return {"neonlite_dense": step}


def note(row):
    """The score/probability buffers of the block-sparse and the dense layer."""
    return ", ".join(_NOTES[k] for k in ("sparse", "dense") if k in _NOTES)


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
