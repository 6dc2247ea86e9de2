"""float64 parity of the recurrent layers with PyTorch (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``,
one-directional and bidirectional; weights mapped W = weight_ih^T, U = weight_hh^T, b =
bias_ih (+ bias_hh for RNN/LSTM, bias_hh is GRU's b_h)): outputs, final states, the input
gradient and every parameter gradient to 1e-10; and padded sequences against PyTorch run on
each sequence's real steps alone, and to ``pack_padded_sequence``."""
import numpy as np
import pytest
from support.harness import build

import neonlite
from neonlite.layers import GRU, LSTM, BiGRU, BiLSTM, BiRNN, Recurrent

torch = pytest.importorskip("torch", reason="PyTorch is needed for the parity tests")

N, T, D, H = 3, 6, 4, 5
PAIRS = {Recurrent: torch.nn.RNN, LSTM: torch.nn.LSTM, GRU: torch.nn.GRU,
         BiRNN: torch.nn.RNN, BiLSTM: torch.nn.LSTM, BiGRU: torch.nn.GRU}


def _cells(layer):
    return [layer.fwd, layer.bwd] if hasattr(layer, "fwd") else [layer]


def _load_torch(module, layer, rng):
    """Random neonlite weights, copied into the torch module."""
    for k, cell in enumerate(_cells(layer)):
        suffix = "_reverse" if k else ""
        for p in cell.parameters():
            p.value.set(rng.normal(0, 0.4, p.value.shape))
        b_h = cell.b_h.value.get() if isinstance(cell, GRU) else np.zeros(cell.b.value.shape)
        with torch.no_grad():
            for name, value in (("weight_ih", cell.W.value.get().T),
                                ("weight_hh", cell.U.value.get().T),
                                ("bias_ih", cell.b.value.get()), ("bias_hh", b_h)):
                getattr(module, f"{name}_l0{suffix}").copy_(torch.tensor(value))


def _torch_grads(module, layer):
    out = {}
    for k, cell in enumerate(_cells(layer)):
        suffix = "_reverse" if k else ""
        g = {n: getattr(module, f"{n}_l0{suffix}").grad.numpy()
             for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        out[cell.W.name] = g["weight_ih"].T
        out[cell.U.name] = g["weight_hh"].T
        if isinstance(cell, GRU):
            out[cell.b.name], out[cell.b_h.name] = g["bias_ih"], g["bias_hh"]
        else:
            out[cell.b.name] = g["bias_ih"]
    return out


@pytest.mark.parametrize("cls", list(PAIRS), ids=lambda c: c.__name__)
@pytest.mark.parametrize("return_sequences", [True, False])
def test_outputs_and_gradients_match_pytorch(cls, return_sequences):
    neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(11)
    net = build(cls(H, return_sequences=return_sequences), (T, D))
    layer = net.layers[0]
    bidirectional = hasattr(layer, "fwd")
    module = PAIRS[cls](D, H, batch_first=True, bidirectional=bidirectional).double()
    _load_torch(module, layer, rng)
    x = rng.normal(size=(N, T, D))
    y = net.fprop(be.array(x)).get()
    w = rng.normal(size=y.shape)
    for p in net.parameters():
        p.grad[:] = 0.0
    dx = net.bprop(be.array(w)).get()

    xt = torch.tensor(x, requires_grad=True)
    seq, state = module(xt)
    h_n = state[0] if isinstance(state, tuple) else state
    want = seq if return_sequences else torch.cat(list(h_n), dim=-1)
    (want * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=0, atol=1e-10)
    grads = _torch_grads(module, layer)
    for p in net.parameters():
        np.testing.assert_allclose(p.grad.get(), grads[p.name], rtol=0, atol=1e-10,
                                   err_msg=p.name)


@pytest.mark.parametrize("cls", [LSTM, GRU, BiLSTM], ids=lambda c: c.__name__)
def test_padded_sequences_match_pytorch_on_their_real_steps(cls):
    neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(12)
    layer = build(cls(H), (T, D)).layers[0]
    bidirectional = hasattr(layer, "fwd")
    module = PAIRS[cls](D, H, batch_first=True, bidirectional=bidirectional).double()
    _load_torch(module, layer, rng)
    lengths = [T, 3, 1]
    mask = np.array([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths])
    x = rng.normal(size=(N, T, D))
    w = rng.normal(size=(N, T, H * (2 if bidirectional else 1))) * mask[:, :, None]
    for p in layer.parameters():
        p.grad[:] = 0.0
    y = layer.fprop(be.array(x), mask=be.array(mask)).get()
    dx = layer.bprop(be.array(w)).get()
    module.zero_grad()
    for n, length in enumerate(lengths):
        xt = torch.tensor(x[n:n + 1, :length], requires_grad=True)
        seq = module(xt)[0]
        np.testing.assert_allclose(y[n, :length], seq[0].detach().numpy(), rtol=0, atol=1e-10)
        (seq * torch.tensor(w[n:n + 1, :length])).sum().backward()
        np.testing.assert_allclose(dx[n, :length], xt.grad.numpy()[0], rtol=0, atol=1e-10)
        assert not dx[n, length:].any() and not y[n, length:].any()
    grads = _torch_grads(module, layer)
    for p in layer.parameters():
        np.testing.assert_allclose(p.grad.get(), grads[p.name], rtol=0, atol=1e-10,
                                   err_msg=p.name)


@pytest.mark.parametrize("cls", list(PAIRS), ids=lambda c: c.__name__)
@pytest.mark.parametrize("return_sequences", [True, False])
def test_packed_sequences_match_pytorch_final_states_included(cls, return_sequences):
    """A batch of T' = T - 1 steps (shorter than the layer's T) of sequences of unsorted
    lengths, with their padding mask, against ``pack_padded_sequence``: the outputs (0 at
    pads), the final states (h, and an LSTM's c: each direction's at its sequence's last
    real step, the reverse one's starting there), the input gradient and every parameter
    gradient."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    neonlite.gen_backend("cpu", batch_size=N, rng_seed=0, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(13)
    layer = build(cls(H, return_sequences=return_sequences), (T, D)).layers[0]
    bidirectional = hasattr(layer, "fwd")
    module = PAIRS[cls](D, H, batch_first=True, bidirectional=bidirectional).double()
    _load_torch(module, layer, rng)
    steps, lengths = T - 1, [3, T - 1, 1]
    mask = (np.arange(steps)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    x = rng.normal(size=(N, steps, D))
    for p in layer.parameters():
        p.grad[:] = 0.0
    y = layer.fprop(be.array(x), mask=be.array(mask)).get()
    w = rng.normal(size=y.shape) * (mask[:, :, None] if return_sequences else 1.0)
    dx = layer.bprop(be.array(w)).get()

    xt = torch.tensor(x, requires_grad=True)
    packed = pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False)
    out, state = module(packed)
    seq = pad_packed_sequence(out, batch_first=True, total_length=steps)[0]
    h_n, c_n = state if isinstance(state, tuple) else (state, None)
    want = seq if return_sequences else torch.cat(list(h_n), dim=-1)
    (want * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=0, atol=1e-10)
    for k, cell in enumerate(_cells(layer)):  # final states, each direction's
        last = 0 if cell.reverse else steps
        for s, torch_state in (("h", h_n), ("c", c_n)):
            if s in cell.states:
                np.testing.assert_allclose(cell.seq[s][last].get(),
                                           torch_state[k].detach().numpy(), rtol=0, atol=1e-10,
                                           err_msg=f"{cell.name}: final {s}")
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=0, atol=1e-10)
    grads = _torch_grads(module, layer)
    for p in layer.parameters():
        np.testing.assert_allclose(p.grad.get(), grads[p.name], rtol=0, atol=1e-10,
                                   err_msg=p.name)
