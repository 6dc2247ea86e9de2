"""What the recurrent layers, both backends and the recurrent reference share: the names of
the cells' activations, the codes the C and CUDA gate kernels take for them, and the order of
a whole-sequence pass."""

ACTIVATIONS = ("tanh", "logistic", "relu", "identity")
#: the codes the C and CUDA gate kernels take
ACTIVATION_CODES = {name: code for code, name in enumerate(ACTIVATIONS)}


def time_steps(T, reverse, backwards=False):
    """(t, p, q) of a whole-sequence pass in its order: step t and the entries p before and q
    after it of the state sequence (T+1, N, H); forwards t = 0..T-1 (T-1..0 with
    ``reverse``), ``backwards`` the opposite."""
    order = range(T - 1, -1, -1) if reverse != backwards else range(T)
    return [(t, t + 1, t) if reverse else (t, t, t + 1) for t in order]


def step_of(steps, t):
    """Step t of a per-step array (mask, dy), or None."""
    return None if steps is None else steps[t]
