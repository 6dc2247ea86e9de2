"""The implicit-GEMM convolution kernels (``kernels/cuda/conv_simt.cu`` float32,
``conv_tc.cu`` float16/bfloat16 on mma.sync m16n8k16) on the host emulator, against the numpy
reference (``backends/reference/conv.py``) in float64.

Each pass is launched exactly as the GPU backend launches it (``backends/gpu_conv.py`` picks the
entry point, tile, grid and K split), on LeNet-like, odd (C=3, 7x7 stride 2, 1x1 stride 2,
batch 1, dilation, non-square) and tile-crossing shapes; the tensor-core kernels run with the
emulated mma.sync, so their fragment addressing is checked element by element; shapes with C
and K multiples of 8 (4 for float32) take the 16-byte loads, the others the element-wise ones.
Tolerances:
float32 1e-4 relative to the output's largest magnitude (a different summation order);
float16/bfloat16 2e-3 / 1e-2 of it (the reference sees the same rounded inputs, so only the
output rounding and the float32 sums differ).
"""
from dataclasses import replace

import numpy as np
import pytest
from support.cuda_host_emulator import HostModule
from support.requires import requires

from neonlite.backends.reference import conv as numpy_conv
from neonlite.backends.gpu.conv_launch import conv_launch, function_for, gemm_dims, shape_args
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.backends.plans import ConvPlan
from neonlite.kernels import cuda_specs, specs

pytestmark = requires("emulator")

CUDA = specs.find("pool").root / "cuda"
SHAPES = {  # N, H, W, C, K, (R, S), pad, stride, dilation
    "lenet": (2, 12, 12, 1, 8, (5, 5), 2, 1, 1),
    "c3_7x7_s2_n1": (1, 9, 7, 3, 4, (7, 7), 3, 2, 1),
    "1x1_s2": (3, 8, 8, 5, 6, (1, 1), 0, 2, 1),
    "dilated": (2, 9, 9, 3, 5, (3, 3), 2, 1, 2),
    "dilated_strided_c8": (2, 11, 9, 8, 16, (3, 3), 2, 2, 2),
    "non_square": (2, 6, 5, 16, 24, (3, 2), (1, 0), (2, 1), 1),
    "tiles_and_split": (2, 16, 16, 8, 40, (3, 3), 1, 1, 1),
}
TOL = {"f32": 1e-4, "f16": 2e-3, "bf16": 1e-2}


def _module(source):
    header = (CUDA / "neonlite_common.cuh").read_text() + (CUDA / "conv_igemm.cuh").read_text()
    spec = specs.find(source)
    kernels = {name: 8 if "splitk" in name else 9 for name in spec.functions}
    return HostModule([spec.source_path.read_text()], kernels, prelude=header)


@pytest.fixture(scope="module")
def modules():
    return {"f32": _module("conv_simt"), "tc": _module("conv_tc")}


def _plan(shape):
    N, H, W, C, K, (R, S), pad, stride, dil = shape
    return ConvPlan(N, C, H, W, K, R, S, pad, stride, dil)


def _to_storage(x, storage):
    if storage == "f32":
        return np.ascontiguousarray(x, np.float32)
    if storage == "f16":
        return np.ascontiguousarray(x, np.float16)
    return f32_to_bf16(np.ascontiguousarray(x, np.float32))


def _from_storage(x, storage):
    return bf16_to_f32(x) if storage == "bf16" else x.astype(np.float64)


def run_pass(modules, plan, pass_name, storage, a, b, out, bias=None, beta=0.0, relu=0,
             split_target=None, vector=True, tiles=None):
    """Launch ``pass_name`` as the GPU backend does (``vector=False``: never the 8-wide
    loads); ``out`` (storage type) is written.  Returns the launch and the entry point."""
    kw = {} if split_target is None else {"split_target": split_target}
    kw.update({} if tiles is None else {"tiles": tiles})
    launch = conv_launch(plan, pass_name, storage, **kw)
    name = function_for(launch, *(t.ctypes.data for t in (out, a, b))) if vector \
        else launch.function
    module = modules["f32" if storage == "f32" else "tc"]
    work = np.zeros(max(1, launch.work_elems), np.float32)
    bias_arg = 0 if bias is None else bias
    module.launch(name, launch.grid, launch.block,
                  [out, a, b, bias_arg, work if launch.splits > 1 else 0,
                   np.array(shape_args(plan), np.int32), launch.splits, beta, relu])
    if launch.splits > 1:
        modules["f32"].launch(f"nl_conv_splitk_reduce_{storage}", (4,), (64,),
                              [out, work, bias_arg, launch.M, launch.Ng, launch.splits, beta,
                               relu])
    return launch, name


def _reference(plan, pass_name, x, f, e):
    ref = ConvPlan(plan.N, plan.C, plan.H, plan.W, plan.K, plan.R, plan.S,
                   (plan.pad_h, plan.pad_w), (plan.str_h, plan.str_w), (plan.dil_h, plan.dil_w))
    if pass_name == "fprop":
        out = np.zeros(ref.out_shape)
        numpy_conv.fprop_conv(ref, x, f, out)
    elif pass_name == "bprop":
        out = np.zeros(ref.in_shape)
        numpy_conv.bprop_conv(ref, f, e, out)
    else:
        out = np.zeros(ref.filter_shape)
        numpy_conv.update_conv(ref, x, e, out)
    return out


def _check(got, want, storage, what):
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[storage] * scale, err_msg=what)


LARGE_TILES = tuple(replace(t, min_mn=0, min_ng=0) for t in cuda_specs.CONV_TILES
                    if t.bm == 128)


@pytest.mark.parametrize("storage,vector", [("f32", False), ("f32", True), ("bf16", True),
                                            ("f16", True)])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_three_passes_match_numpy(modules, name, storage, vector):
    """Each pass with the tile the table picks."""
    _check_three_passes(modules, name, storage, vector, None)


@pytest.mark.parametrize("storage,vector", [("f32", True), ("bf16", True)])
@pytest.mark.parametrize("name", ["non_square", "c3_7x7_s2_n1"])
def test_large_tiles_on_small_shapes(modules, name, storage, vector):
    """The 128-row tiles forced onto small shapes (their edges masked)."""
    _check_three_passes(modules, name, storage, vector, LARGE_TILES)


def _check_three_passes(modules, name, storage, vector, tiles):
    plan = _plan(SHAPES[name])
    rng = np.random.default_rng(sum(map(ord, name)))
    xs, fs, es = (_to_storage(rng.normal(size=s), storage)
                  for s in (plan.in_shape, plan.filter_shape, plan.out_shape))
    x, f, e = (_from_storage(t, storage) for t in (xs, fs, es))
    sources = {"fprop": (xs, fs, plan.out_shape), "bprop": (es, fs, plan.in_shape),
               "update": (xs, es, plan.filter_shape)}
    for pass_name, (a, b, out_shape) in sources.items():
        out = _to_storage(np.zeros(out_shape), storage)
        launch, fn = run_pass(modules, plan, pass_name, storage, a, b, out, vector=vector,
                              tiles=tiles)
        assert tiles is None or "128x" in fn
        assert launch.function.endswith(storage)
        width = 4 if storage == "f32" else 8
        assert fn.endswith(f"_v{width}") == (vector and plan.C % width == 0
                                             and plan.K % width == 0)
        assert (launch.M, launch.Ng, launch.Kd) == gemm_dims(plan, pass_name)
        _check(_from_storage(out, storage), _reference(plan, pass_name, x, f, e), storage,
               f"{name} {pass_name} {storage} via {fn} splits {launch.splits}")


def test_the_shapes_reach_every_tile_and_a_k_split():
    used = {(conv_launch(_plan(s), p, st).function.split("_")[3], conv_launch(
        _plan(s), p, st).splits > 1) for s in SHAPES.values()
        for p in ("fprop", "bprop", "update") for st in ("f32", "bf16")}
    tiles = {t for t, _ in used}
    assert {"simt32x32", "simt64x64", "tc64x64"} <= tiles, tiles
    assert any(split for _, split in used)


@pytest.mark.parametrize("storage", ["f32", "bf16"])
@pytest.mark.parametrize("split_target", [1, 400])
def test_fprop_epilogue_bias_relu_beta_and_split(modules, storage, split_target):
    """out = relu(conv + beta * out + bias), with and without a K split."""
    plan = _plan((2, 10, 10, 32, 12, (3, 3), 1, 1, 1))
    rng = np.random.default_rng(5)
    xs, fs = _to_storage(rng.normal(size=plan.in_shape), storage), \
        _to_storage(rng.normal(size=plan.filter_shape), storage)
    bias = _to_storage(rng.normal(size=plan.K), storage)
    before = _to_storage(rng.normal(size=plan.out_shape), storage)
    out = before.copy()
    launch, _ = run_pass(modules, plan, "fprop", storage, xs, fs, out, bias=bias, beta=0.5,
                         relu=1, split_target=split_target)
    assert (launch.splits > 1) == (split_target > 1)
    want = _reference(plan, "fprop", _from_storage(xs, storage), _from_storage(fs, storage), None)
    want = np.maximum(want + 0.5 * _from_storage(before, storage) + _from_storage(bias, storage),
                      0.0)
    _check(_from_storage(out, storage), want, storage, f"epilogue {launch.function}")
    assert (_from_storage(out, storage) == 0).mean() > 0.2


@pytest.mark.parametrize("storage", ["f32", "bf16"])
@pytest.mark.parametrize("split_target", [1, 400])
def test_fprop_epilogue_relu_keeps_nan(modules, storage, split_target):
    """A NaN in the input gives NaN outputs that the ReLU keeps (as numpy's maximum and the
    CPU kernels do), so a loss scaler still sees the overflow; the other outputs are finite."""
    plan = _plan((1, 6, 6, 8, 8, (3, 3), 1, 1, 1))
    rng = np.random.default_rng(6)
    x = rng.normal(size=plan.in_shape)
    x[0, 0, 0, 0] = np.nan
    xs, fs = _to_storage(x, storage), _to_storage(rng.normal(size=plan.filter_shape), storage)
    out = _to_storage(np.zeros(plan.out_shape), storage)
    run_pass(modules, plan, "fprop", storage, xs, fs, out, relu=1, split_target=split_target)
    want = _reference(plan, "fprop", _from_storage(xs, storage), _from_storage(fs, storage), None)
    got = _from_storage(out, storage)
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
