"""The transformer block against PyTorch's own modules (same weights, float64): forward
outputs and gradients agree, which pins down the conventions (pre-norm, head split, 1/sqrt(dh)
scaling, causal mask, exact-erf GELU)."""
import numpy as np
import pytest
from support.harness import build

import neonlite
from neonlite.layers import TransformerBlock

torch = pytest.importorskip("torch", reason="PyTorch is not installed")


@pytest.mark.parametrize("causal", [True, False])
def test_block_matches_pytorch(causal):
    N, T, d, H = 2, 5, 8, 2
    be = neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    net = build(TransformerBlock(d, H, mlp_ratio=4, causal=causal, name="b"), (T, d))
    block = net.layers[0]
    rng = np.random.default_rng(0)
    for p in net.parameters():
        p.value.set(rng.normal(0, 0.3, p.value.shape))
    P = {p.name.split("b.", 1)[1]: torch.tensor(p.value.get()) for p in net.parameters()}

    ln1, ln2 = torch.nn.LayerNorm(d).double(), torch.nn.LayerNorm(d).double()
    attn = torch.nn.MultiheadAttention(d, H, batch_first=True).double()
    fc1, fc2 = torch.nn.Linear(d, 4 * d).double(), torch.nn.Linear(4 * d, d).double()
    with torch.no_grad():
        for ln, name in ((ln1, "ln1"), (ln2, "ln2")):
            ln.weight.copy_(P[f"{name}.gamma"])
            ln.bias.copy_(P[f"{name}.beta"])
        attn.in_proj_weight.copy_(torch.cat([P["attn.Wq"].T, P["attn.Wk"].T, P["attn.Wv"].T]))
        attn.in_proj_bias.copy_(torch.cat([P["attn.bq"], P["attn.bk"], P["attn.bv"]]))
        attn.out_proj.weight.copy_(P["attn.Wo"].T)
        attn.out_proj.bias.copy_(P["attn.bo"])
        for fc, name in ((fc1, "fc1"), (fc2, "fc2")):
            fc.weight.copy_(P[f"{name}.W"].T)
            fc.bias.copy_(P[f"{name}.b"])

    x = rng.normal(size=(N, T, d))
    w = rng.normal(size=(N, T, d))
    xt = torch.tensor(x, requires_grad=True)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
    h = ln1(xt)
    r = xt + attn(h, h, h, attn_mask=mask, need_weights=False)[0]
    y_ref = r + fc2(torch.nn.functional.gelu(fc1(ln2(r))))
    (y_ref * torch.tensor(w)).sum().backward()

    for p in net.parameters():
        p.grad[:] = 0
    y = block.fprop(be.array(x)).get()
    dx = block.bprop(be.array(w)).get()
    np.testing.assert_allclose(y, y_ref.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-9, atol=1e-10)
    grads = {p.name: p.grad.get() for p in net.parameters()}
    np.testing.assert_allclose(grads["b.fc1.W"], fc1.weight.grad.numpy().T, rtol=1e-9,
                               atol=1e-10)
    np.testing.assert_allclose(grads["b.attn.Wq"], attn.in_proj_weight.grad[:d].numpy().T,
                               rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(grads["b.ln1.gamma"], ln1.weight.grad.numpy(), rtol=1e-9,
                               atol=1e-10)
