"""RMSNorm (``layers/layernorm.py``, the ``rmsnorm_*`` rows of the op table) and
``TransformerBlock(norm_type="rms")``: float64 finite-difference gradients, float64 parity with
``torch.nn.RMSNorm`` forward and backward (with and without the joined residual add), the
YAML description, and the option's errors.  The kernels against the reference on every
backend are rows of ``tests/backend/test_op_table.py``."""
import numpy as np
import pytest
from support.harness import build, gradient_check
from support.requires import requires

import neonlite
from neonlite import Model
from neonlite.config.errors import ConfigError
from neonlite.config.yaml_io import parse_yaml
from neonlite.initializers import Gaussian
from neonlite.layers import LayerNorm, RMSNorm, TransformerBlock

N, T, D = 3, 4, 16


def test_rmsnorm_gradients():
    net = gradient_check(lambda: RMSNorm(eps=1e-5), (T, D), batch=N)
    assert [p.name.rsplit(".", 1)[-1] for p in net.parameters()] == ["gamma"]


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_rms_block_gradients(norm):
    gradient_check(lambda: TransformerBlock(6, 2, mlp_ratio=2, init=Gaussian(scale=0.4),
                                            norm=norm, norm_type="rms"), (3, 6), batch=2)


def _torch_rmsnorm(x, gamma, eps, w, residual=None, v=None):
    """torch.nn.RMSNorm on x (+ residual), float64: (y, total, dx, dgamma) for the loss
    sum(w * y) (+ sum(v * total))."""
    import torch
    norm = torch.nn.RMSNorm(x.shape[-1], eps=eps, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(gamma))
    xt = torch.from_numpy(x).requires_grad_(True)
    total = xt if residual is None else xt + torch.from_numpy(residual)
    y = norm(total)
    loss = (y * torch.from_numpy(w)).sum()
    if v is not None:
        loss = loss + (total * torch.from_numpy(v)).sum()
    loss.backward()
    return (y.detach().numpy(), total.detach().numpy(), xt.grad.numpy(),
            norm.weight.grad.numpy())


@requires("torch")
@pytest.mark.parametrize("joined", [False, True], ids=["plain", "residual"])
def test_rmsnorm_matches_torch(joined):
    """The layer's fprop / bprop against torch.nn.RMSNorm in float64; joined: fprop_joined
    (x + residual normalized, the sum written) and bprop_into with the residual stream's
    gradient v added, as a pre-norm block runs them."""
    be = neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(5)
    layer = RMSNorm(eps=1e-6)
    build(layer, (T, D))
    gamma = rng.normal(size=D)
    layer.gamma.value.set(gamma)
    layer.gamma.grad[:] = 0.0
    x, w = rng.normal(size=(N, T, D)), rng.normal(size=(N, T, D))
    residual, v = (rng.normal(size=(N, T, D)), rng.normal(size=(N, T, D))) if joined else \
        (None, None)
    want_y, want_total, want_dx, want_dgamma = _torch_rmsnorm(x, gamma, 1e-6, w, residual, v)
    if joined:
        total = be.zeros((N, T, D))
        y = layer.fprop_joined(be.array(x), be.array(residual), total)
        np.testing.assert_allclose(total.get(), want_total, rtol=1e-13, atol=1e-13)
        dx = layer.bprop_into(be.array(w), be.zeros((N, T, D)), be.array(v))
    else:
        y = layer.fprop(be.array(x))
        dx = layer.bprop(be.array(w))
    np.testing.assert_allclose(y.get(), want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx.get(), want_dx, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(layer.gamma.grad.get(), want_dgamma, rtol=1e-11, atol=1e-11)


def test_inference_keeps_no_xhat_and_agrees():
    be = neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    layer = RMSNorm()
    build(layer, (T, D))
    x = be.array(np.random.default_rng(1).normal(size=(N, T, D)))
    trained = layer.fprop(x).get().copy()
    layer.xhat[:] = 0.0
    np.testing.assert_array_equal(layer.fprop(x, inference=True).get(), trained)
    assert not np.any(layer.xhat.get())


def test_rms_block_uses_rmsnorm_and_describes_itself():
    block = TransformerBlock(8, 2, norm_type="rms", bias=False)
    assert type(block.ln1) is RMSNorm and type(block.ln2) is RMSNorm
    assert type(TransformerBlock(8, 2).ln1) is LayerNorm
    desc = block.get_description()
    assert desc["config"]["norm_type"] == "rms"
    again = Model.from_description([desc])
    assert type(again.layers.layers[0].ln2) is RMSNorm


def test_yaml_names_rmsnorm_and_the_rms_block():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    layers = parse_yaml("""
- type: TransformerBlock
  config: {d_model: 8, heads: 2, norm_type: rms, norm: post}
- type: RMSNorm
  config: {eps: 1.0e-6}
""")
    model = Model.from_description(layers)
    block, norm = model.layers.layers
    assert block.norm_type == "rms" and block.norm == "post" and type(block.ln1) is RMSNorm
    assert type(norm) is RMSNorm and norm.eps == 1e-6


def test_norm_type_and_eps_errors():
    with pytest.raises(ValueError, match=r"^TransformerBlock: norm_type must be 'layer' or "
                                         r"'rms', got 'group'$"):
        TransformerBlock(4, 2, norm_type="group")
    with pytest.raises(ValueError, match=r"^RMSNorm: eps must be a number > 0, got 0$"):
        RMSNorm(eps=0)
    with pytest.raises(ConfigError):
        Model.from_description([{"type": "TransformerBlock",
                                 "config": {"d_model": 4, "heads": 2, "norm_type": "batch"}}])
