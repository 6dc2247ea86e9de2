"""One time step of the recurrent cells on numpy arrays: the reference the C and CUDA gate
kernels are checked against, and what the CPU backend runs where they cannot.

Every array of one step is a row block (N, k) of contiguous rows.  ``mask`` is (N,) (1: the
step is real, 0: padding) or None (every step real); a padded row keeps its state
(h = h_prev, c = c_prev), gets no gate gradients and passes its state gradient straight
through.  Activation names: ``"tanh"``, ``"logistic"``, ``"relu"``, ``"identity"``; a
derivative is taken from the activation's *output* y.

The backward steps read ``dh`` (N, H) as the gradient flowing into h_t from the later steps
and add ``dy`` (N, H, or None) from the layer's output at t; they leave in ``dh`` the part of
dL/dh_{t-1} that does not go through the recurrent weights (the caller adds
``dgates @ U^T``).
"""
import numpy as np

from ..shared.recurrent_steps import ACTIVATIONS, step_of, time_steps



def activate(name, x):
    if name == "tanh":
        return np.tanh(x)
    if name == "logistic":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "relu":
        return np.maximum(x, 0)
    if name == "identity":
        return x.copy()
    raise ValueError(f"unknown recurrent activation {name!r}; expected one of {ACTIVATIONS}")


def slope(name, y):
    """The activation's derivative, from its output y."""
    if name == "tanh":
        return 1 - y * y
    if name == "logistic":
        return y * (1 - y)
    if name == "relu":
        return (y > 0).astype(y.dtype)
    if name == "identity":
        return np.ones_like(y)
    raise ValueError(f"unknown recurrent activation {name!r}; expected one of {ACTIVATIONS}")


def _keep(mask, new, old):
    """``new`` where the row is real, ``old`` where it is padding."""
    if mask is None:
        return new
    m = (mask.reshape(-1, 1) != 0)
    return np.where(m, new, old)


def _total(dy, dh):
    return dh if dy is None else dh + dy


def rnn_fprop_step(xg, hg, h_prev, h, mask, activation):
    """h = act(xg + hg), xg (N, H) the input projection with bias, hg = h_prev @ U."""
    h[...] = _keep(mask, activate(activation, xg + hg), h_prev)


def rnn_bprop_step(h, dy, dh, dpre, mask, activation):
    """dpre (N, H) = (dh + dy) * act'(h); dh <- the padded rows' total (0 elsewhere)."""
    total = _total(dy, dh)
    dpre[...] = _keep(mask, total * slope(activation, h), 0.0)
    dh[...] = _keep(mask, 0.0, total)


def lstm_fprop_step(gates, hg, c_prev, c, h_prev, h, mask, activation, gate_activation):
    """gates (N, 4H): in, the input projection with bias, gate order (i, f, g, o); out, the
    activated gates.  c = f c_prev + i g, h = o act(c)."""
    H = c.shape[-1]
    pre = gates + hg
    i = activate(gate_activation, pre[:, :H])
    f = activate(gate_activation, pre[:, H:2 * H])
    g = activate(activation, pre[:, 2 * H:3 * H])
    o = activate(gate_activation, pre[:, 3 * H:])
    cell = f * c_prev + i * g
    out = o * activate(activation, cell)
    gates[...] = np.concatenate([i, f, g, o], axis=1)
    c[...] = _keep(mask, cell, c_prev)
    h[...] = _keep(mask, out, h_prev)


def lstm_bprop_step(gates, c_prev, c, dy, dh, dc, dgates, mask, activation, gate_activation):
    """dgates (N, 4H) = dL/d(pre-activations); dc (N, H): in dL/dc_t from step t+1, out
    dL/dc_{t-1}; dh as in the module docstring."""
    H = c.shape[-1]
    i, f, g, o = (gates[:, k * H:(k + 1) * H] for k in range(4))
    total = _total(dy, dh)
    act_c = activate(activation, c)
    dcell = dc + total * o * slope(activation, act_c)
    grads = np.concatenate([dcell * g * slope(gate_activation, i),
                            dcell * c_prev * slope(gate_activation, f),
                            dcell * i * slope(activation, g),
                            total * act_c * slope(gate_activation, o)], axis=1)
    dgates[...] = _keep(mask, grads, 0.0)
    dc[...] = _keep(mask, dcell * f, dc)
    dh[...] = _keep(mask, 0.0, total)


def gru_fprop_step(gates, hg, bias_h, hn, h_prev, h, mask):
    """PyTorch's GRU: gates (N, 3H) in, the input projection with its bias, order (r, z, n);
    out, the activated r, z, n.  hg = h_prev @ U (N, 3H) without bias, bias_h (3H,);
    hn (N, H) <- hg_n + bias_h_n.  r = sig(x_r + h_r), z = sig(x_z + h_z),
    n = tanh(x_n + r hn), h = (1 - z) n + z h_prev."""
    H = h.shape[-1]
    hb = hg + bias_h.reshape(1, -1)
    r = activate("logistic", gates[:, :H] + hb[:, :H])
    z = activate("logistic", gates[:, H:2 * H] + hb[:, H:2 * H])
    n = np.tanh(gates[:, 2 * H:] + r * hb[:, 2 * H:])
    hn[...] = hb[:, 2 * H:]
    gates[...] = np.concatenate([r, z, n], axis=1)
    h[...] = _keep(mask, (1 - z) * n + z * h_prev, h_prev)


def gru_bprop_step(gates, hn, h_prev, dy, dh, dgx, dgh, mask):
    """dgx (N, 3H) = dL/d(input projection), dgh (N, 3H) = dL/d(h_prev @ U + bias_h); dh <-
    dL/dh_{t-1} through the z gate (the padded rows' total)."""
    H = h_prev.shape[-1]
    r, z, n = (gates[:, k * H:(k + 1) * H] for k in range(3))
    total = _total(dy, dh)
    dn = total * (1 - z) * (1 - n * n)
    dz = total * (h_prev - n) * z * (1 - z)
    dr = dn * hn * r * (1 - r)
    dgx[...] = _keep(mask, np.concatenate([dr, dz, dn], axis=1), 0.0)
    dgh[...] = _keep(mask, np.concatenate([dr, dz, dn * r], axis=1), 0.0)
    dh[...] = _keep(mask, total * z, total)


# ---- whole sequences: the step functions above over T steps, as ``Backend.*_sequence`` ----
def rnn_fprop_sequence(xg, U, h, mask, reverse, activation):
    """xg (T, N, H), U (H, H); h (T+1, N, H) from its initial entry (0, T with ``reverse``)."""
    for t, p, q in time_steps(len(xg), reverse):
        rnn_fprop_step(xg[t], h[p] @ U, h[p], h[q], step_of(mask, t), activation)


def rnn_bprop_sequence(h, U, dy, dh, dpre, mask, reverse, activation):
    """dpre (T, N, H) out; dh (N, H) in the error of the final state, out that of the initial
    one but for its last product with U^T (as ``Backend.rnn_bprop_sequence``)."""
    T = len(dpre)
    for k, (t, p, q) in enumerate(time_steps(T, reverse, backwards=True)):
        rnn_bprop_step(h[q], step_of(dy, t), dh, dpre[t], step_of(mask, t), activation)
        if k < T - 1:
            dh += dpre[t] @ U.T


def lstm_fprop_sequence(gates, U, c, h, mask, reverse, activation, gate_activation):
    """gates (T, N, 4H) in the input projections, out the activated gates; c, h (T+1, N, H)."""
    for t, p, q in time_steps(len(gates), reverse):
        lstm_fprop_step(gates[t], h[p] @ U, c[p], c[q], h[p], h[q], step_of(mask, t),
                        activation, gate_activation)


def lstm_bprop_sequence(gates, U, c, dy, dh, dc, dgates, mask, reverse, activation,
                        gate_activation):
    """dgates (T, N, 4H) out; dh, dc (N, H) as in ``rnn_bprop_sequence``."""
    T = len(gates)
    for k, (t, p, q) in enumerate(time_steps(T, reverse, backwards=True)):
        lstm_bprop_step(gates[t], c[p], c[q], step_of(dy, t), dh, dc, dgates[t],
                        step_of(mask, t), activation, gate_activation)
        if k < T - 1:
            dh += dgates[t] @ U.T


def gru_fprop_sequence(gates, U, bias_h, hn, h, mask, reverse):
    """gates (T, N, 3H) in the input projections, out the activated gates; hn (T, N, H) out;
    h (T+1, N, H)."""
    for t, p, q in time_steps(len(gates), reverse):
        gru_fprop_step(gates[t], h[p] @ U, bias_h, hn[t], h[p], h[q], step_of(mask, t))


def gru_bprop_sequence(gates, U, hn, h, dy, dh, dgx, dgh, mask, reverse):
    """dgx, dgh (T, N, 3H) out; dh as in ``rnn_bprop_sequence``."""
    T = len(gates)
    for k, (t, p, q) in enumerate(time_steps(T, reverse, backwards=True)):
        gru_bprop_step(gates[t], hn[t], h[p], step_of(dy, t), dh, dgx[t], dgh[t],
                       step_of(mask, t))
        if k < T - 1:
            dh += dgh[t] @ U.T
