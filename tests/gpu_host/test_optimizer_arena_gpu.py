"""The parameter arena on the GPU backend (``backends/gpu/arena.py``, made by the backend's
``make_arena``), with the
device replaced by the host emulator (compiled and emulated, not run on a GPU): an AdamW step
with decay groups, clipping by global norm and bfloat16 states over the arena, as one
generated kernel per run of parameters, equals the per-parameter updates; the parameters and
states are views of the arena's buffers; class-index targets reach the index kernel."""
import numpy as np
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite import Model
from neonlite.layers import Affine, GeneralizedCost, LayerNorm
from neonlite.optimizers import AdamW
from neonlite.transforms import CrossEntropyMulti, Softmax

pytestmark = requires("emulator")


class _Data:
    shape, target_shape, name = (6,), (), "arena"


def _train(be, arena, steps=3, state_dtype="bf16"):
    be.rng = np.random.default_rng(0)
    model = Model([Affine(8, name="fc"), LayerNorm(name="ln"),
                   Affine(5, activation=Softmax(), name="head")])
    model.initialize(_Data(), GeneralizedCost(CrossEntropyMulti()))
    if not arena:
        model.arena = None
        for p in model.parameters():
            p.arena = None
    opt = AdamW(1e-2, weight_decay=0.1, decay_exclude=["1d"], gradient_clip_norm=0.5,
                state_dtype=state_dtype)
    rng = np.random.default_rng(1)
    x = be.array(rng.normal(size=(be.bsz, 6)))
    t = be.array(rng.integers(0, 5, be.bsz), dtype=np.int32)
    losses = [model.train_step(x, t, opt, 0) for _ in range(steps)]
    return model, losses


def test_device_arena_step_equals_the_per_parameter_updates(monkeypatch):
    previous = neonlite.backends._current
    try:
        be = host_gpu_backend(monkeypatch)
        fused, fused_losses = _train(be, arena=True)
        fused_launches = len(be.device.launches)
        plain, plain_losses = _train(be, arena=False)
        per_param_launches = len(be.device.launches) - fused_launches
    finally:
        neonlite.backends._current = previous
    arena = fused.arena
    assert type(arena).__name__ == "DeviceArena"
    buf = arena.values[np.dtype(np.float32)]
    for p in fused.parameters():
        assert buf.ptr <= p.value.ptr < buf.ptr + buf.size * 4
        assert p.states["m"].dtype == np.uint16
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-6)
    for a, b in zip(fused.parameters(), plain.parameters()):
        np.testing.assert_allclose(a.value.get(), b.value.get(), rtol=1e-6, atol=1e-7,
                                   err_msg=a.name)
        np.testing.assert_array_equal(a.states["v"].get(), b.states["v"].get())
    assert "nl_softmax_xent_index_f32" in set(be.device.launches)
    # 3 steps: per parameter, one update kernel and one norm reduction per parameter; fused,
    # one of each per run (decay on the matrices, off on the 1-D gains and biases)
    assert fused_launches < per_param_launches


def test_device_arena_finds_a_nan_in_an_optimizer_state(monkeypatch):
    """``all_finite(states=True)`` reads the arena's state buffers (one reduction each), so
    the finiteness guard names a state that holds a NaN; bfloat16 states answer False there
    and the guard's per-tensor path still finds nothing wrong in clean ones."""
    previous = neonlite.backends._current
    try:
        be = host_gpu_backend(monkeypatch)
        model, _ = _train(be, arena=True, steps=1, state_dtype="f32")
        assert model.arena.all_finite(states=True)
        assert model.first_nonfinite() is None
        state = model.parameters()[0].states["v"]
        values = state.get()
        values.flat[3] = np.nan
        state.set(values)
        assert model.arena.all_finite()
        assert not model.arena.all_finite(states=True)
        assert model.first_nonfinite() == f"{model.parameters()[0].name}/v"
        bf16, _ = _train(be, arena=True, steps=1)
        assert not bf16.arena.all_finite(states=True)
        assert bf16.first_nonfinite() is None
    finally:
        neonlite.backends._current = previous
