"""GELU on bfloat16 rows: ``gelu_fprop_bf16`` and ``gelu_bprop_bf16`` (``kernels/cpu/gelu.c``,
the rows' ``bf16_symbol``), each row one vector pass that widens, computes and rounds in
registers, against the boundary's widening path (every operand widened into float32 work
tensors, the float32 kernel, the written ones rounded back) bit for bit, in every case the
kernels compile apart: the erf and tanh forms, with and without a bias, with the sum kept
apart, kept in place of x or not kept (inference), with the forward output given to the
backward pass or not, with and without a bias gradient, dx written over dy.  The values
include zeros of both signs, values whose GELU underflows or saturates, infinities and a NaN,
so the special cases of the arithmetic take the same branches in both."""
import numpy as np
import pytest
from support.requires import requires

import neonlite
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.shared.bfloat16 import f32_to_bf16

pytestmark = [requires("compiler"), pytest.mark.usefixtures("keep_backend")]

#: (M, D): rows past one vector and not a multiple of 16, big enough for the OpenMP loop; a
#: few short ones
SHAPES = [(67, 517), (3, 5)]
APPROXIMATE = ("none", "tanh")
SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 12.0, -12.0, np.inf, -np.inf,
                    np.nan, 1.0], np.float32)


def _bits(rng, shape):
    """bf16 bits of normal values, the special values in the first row."""
    values = rng.normal(scale=2.0, size=shape).astype(np.float32)
    flat = values.reshape(-1)
    flat[:min(flat.size, SPECIAL.size)] = SPECIAL[:flat.size]
    return f32_to_bf16(values)


def _assert_same_bits(monkeypatch, call):
    """``call(be)``'s arrays by the bf16 kernels equal, bit for bit, the widening path's."""
    fused, ran = _run(monkeypatch, True, call)
    widened, _ = _run(monkeypatch, False, call)
    assert ran, "the bf16 kernel ran"
    for got, want in zip(fused, widened):
        np.testing.assert_array_equal(got, want)


def _run(monkeypatch, fused, call):
    """``call(be)`` on a fresh bf16 backend, by the bf16 kernels (``fused``) or with them
    refused (the widening path); returns what it returns and whether a bf16 kernel ran."""
    ran = []
    original = KernelModules.run_bf16_op

    def counted(self, *args, **kwargs):
        ran.append(original(self, *args, **kwargs))
        return ran[-1]
    monkeypatch.setattr(KernelModules, "run_bf16_op",
                        counted if fused else lambda *args, **kwargs: False)
    return call(neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype="bf16")), \
        any(ran)


def _tensor(be, bits):
    t = be.empty(bits.shape)
    t._ary[...] = bits
    return t


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("pre", ["apart", "in-place", "none"])
def test_gelu_fprop_rows_give_the_widening_paths_bits(monkeypatch, shape, approximate, bias,
                                                       pre):
    rng = np.random.default_rng(3)
    x, b = _bits(rng, shape), _bits(rng, shape[1:])

    def forward(be):
        X = _tensor(be, x)
        out = be.empty(shape)
        kept = {"apart": be.empty(shape), "in-place": X, "none": None}[pre]
        be.gelu(X, out, _tensor(be, b) if bias else None, kept, approximate=approximate)
        return [out._ary.copy()] + ([] if kept is None else [kept._ary.copy()])
    _assert_same_bits(monkeypatch, forward)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("approximate", APPROXIMATE)
@pytest.mark.parametrize("given_y", [True, False], ids=["y", "no-y"])
@pytest.mark.parametrize("dbias", [True, False], ids=["dbias", "no-dbias"])
@pytest.mark.parametrize("in_place", [False, True], ids=["dx-apart", "dx-over-dy"])
def test_gelu_bprop_rows_give_the_widening_paths_bits(monkeypatch, shape, approximate,
                                                       given_y, dbias, in_place):
    rng = np.random.default_rng(4)
    h, dy, db = _bits(rng, shape), _bits(rng, shape), _bits(rng, shape[1:])

    def backward(be):
        H, DY = _tensor(be, h), _tensor(be, dy)
        Y = be.empty(shape)
        be.gelu(H, Y, None, None, approximate=approximate)
        DX = DY if in_place else be.empty(shape)
        DB = _tensor(be, db) if dbias else None
        be.gelu_bprop(H, DY, DX, DB, y=Y if given_y else None, approximate=approximate)
        return [DX._ary.copy()] + ([] if DB is None else [DB._ary.copy()])
    _assert_same_bits(monkeypatch, backward)
