"""Multi-head self-attention, fprop + bprop of the ``MultiHeadAttention`` layer (float32,
d_model 256, 4 heads of 64) at T = 256, 1024, 4096, causal and not, against PyTorch's
``scaled_dot_product_attention`` between the same projections (one Linear to q, k, v, one
out).  The batch keeps N * T^2 constant (256, 16, 1 sequences), so every row does about the
same attention work.  Smoke mode: T = 16, 32, 64 with d_model 32, 2 heads.  Figure: ms per
step.  The note gives the attention op's peak memory, measured with tracemalloc over its first
forward + backward on a fresh backend (its tile buffers and tables included; the layer's
per-row log-sum-exp added), next to the (N*H, T, T) score + probability-gradient arrays the
unfused layer held."""
import tracemalloc

import numpy as np

from .common import torch_threads

LENGTHS = (256, 1024, 4096)


class AttentionWorkload:
    """One (T, causal) row of the table (a workload module's interface, as an object)."""

    FIGURE = "ms"

    def __init__(self, T, causal):
        self.T, self.causal = T, causal
        self.NAME = f"attention_T{T}" + ("_causal" if causal else "")
        self._note = ""

    def _sizes(self, smoke):
        """(batch, T, d_model, heads)."""
        if smoke:
            T = {256: 16, 1024: 32, 4096: 64}[self.T]
            return 64 * 64 // (T * T) or 1, T, 32, 2
        return (4096 // self.T) ** 2, self.T, 256, 4

    def neonlite(self, make_backend, smoke):
        from neonlite.layers import MultiHeadAttention, Sequential
        N, T, d, heads = self._sizes(smoke)
        be = make_backend(N)
        net = Sequential([MultiHeadAttention(d, heads, causal=self.causal)])
        net.name_children()
        net.configure((T, d))
        net.set_needs_deltas(True)
        net.allocate()
        rng = np.random.default_rng(0)
        x = be.array(rng.standard_normal((N, T, d)))
        e = be.array(rng.standard_normal((N, T, d)))
        # the op's host-memory peak: the CPU backend's; a GPU's work tensors are device memory
        self._note = self._peak_note(be, net.layers[0], x, e) if be.name == "cpu" else ""

        def step():
            net.fprop(x)
            net.bprop(e)
        return step, None

    @staticmethod
    def _peak_note(be, layer, x, e):
        """Peak bytes of the attention op alone, on the layer's own head buffers."""
        layer.fprop(x)  # head buffers filled; then forget the op's workspaces and tables
        be.forget_prepared()
        tracemalloc.start()
        be.attention(layer.qh, layer.kh, layer.vh, layer.oh, layer.lse, layer.scale,
                     layer.causal, None, None, None, layer.heads)
        be.attention_bprop(layer.qh, layer.kh, layer.vh, layer.oh, layer.lse, layer.oh,
                           layer.dqh, layer.dkh, layer.dvh, layer.scale, layer.causal, None,
                           None, None, layer.heads)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peak += layer.lse.size * layer.lse.dtype.itemsize
        B, Tq, Tk = layer.lse.shape[0], layer.Tq, layer.Tk
        dense = 2 * B * Tq * Tk * np.dtype(layer.qh.dtype).itemsize
        return (f"attention op peak {peak / 2**20:.2f} MiB measured (unfused scores + "
                f"gradients {dense / 2**20:.0f} MiB)")

    def torch(self, device, smoke):
        torch = torch_threads()
        N, T, d, heads = self._sizes(smoke)
        proj = torch.nn.Linear(d, 3 * d).to(device)
        out = torch.nn.Linear(d, d).to(device)
        x = torch.randn(N, T, d, device=device, requires_grad=True)
        e = torch.randn(N, T, d, device=device)
        causal = self.causal

        def step():
            x.grad = None
            q, k, v = proj(x).view(N, T, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            out(o.transpose(1, 2).reshape(N, T, d)).backward(e)
        return step, None

    def note(self, row):
        return self._note


WORKLOADS = tuple(AttentionWorkload(T, causal) for T in LENGTHS for causal in (False, True))
