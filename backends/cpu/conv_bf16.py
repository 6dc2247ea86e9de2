"""Convolution passes on bfloat16 operands (bit patterns, ``uint16``) that read and write bf16
directly, for the convolution plans' ``direct`` and ``tiled`` algorithms (``conv.py``): the
``*_bf16`` functions of ``kernels/cpu/conv_direct.c`` widen each image while padding it into a
thread's float32 slice, those of ``kernels/cpu/conv.c`` widen patches while gathering them for
the GEMM (MKL's sgemm, single-threaded per tile); both compute in float32 and round each
output row or tile, each image of a data gradient (summed in float32 first) and the summed
weight gradient once, to nearest even.  So the bf16 boundary (``bf16_boundary.py``) keeps no
float32 copy of a convolution's operands.

Where convolutions take the bf16 compute path (``compute``: the ``conv_compute`` module and
the bf16 GEMM's, from the backend's ``bf16_conv_compute``), every pass of a plan with patch
kernels runs ``kernels/cpu/bf16/conv_compute.c`` instead, whatever its float32 algorithm: the
tiled passes with patches gathered as bf16 bits and each tile's product on the bf16 GEMM
(float32 accumulation), outputs rounded once as above.

Each pass returns True when it did the work and False where it does not take the case (the
``pointwise`` or ``im2col`` algorithm chosen, an operand not C-contiguous bf16): the boundary's
general path then runs.
"""
from dataclasses import dataclass

import numpy as np

from .bf16_boundary import is_bf16_tensor
from .bf16_kernels import gemm_bf16_callee
from .tensor import aligned_empty

_BITS = np.dtype(np.uint16)
_F32 = np.dtype(np.float32)


@dataclass
class ComputeCall:
    """The arguments the compute passes share: ``module`` (``conv_compute``), ``geom`` (its
    ``conv_geom``), ``gemm`` (the bf16 GEMM's address), ``work`` (pointer) and ``gemm_work``
    (each tile GEMM's packing bytes in it), ``nwork`` threads, ``tile`` output rows per GEMM."""
    module: object
    geom: object
    gemm: int
    work: object
    gemm_work: int
    nwork: int
    tile: int

    def run(self, name, operands, *rest):
        """``conv_<name>_compute`` on the bf16 arrays ``operands`` (input, filter or gradient,
        output) and the pass's own arguments ``rest``; returns True."""
        ffi = self.module.ffi
        status = getattr(self.module.lib, f"conv_{name}_compute")(
            *(_pointer(ffi, a) for a in operands), self.geom, self.gemm, self.work,
            self.gemm_work, self.nwork, self.tile, *rest)
        if status != 0:
            raise RuntimeError(f"{name}_conv: the bf16 GEMM refused a tile ({status})")
        return True


def runs_compute(plan, compute):
    """Whether ``plan``'s passes on bf16 operands run on ``compute`` (``(conv_compute module,
    bf16 GEMM module)``, or None where convolutions take the storage path): where the plan has
    patch kernels and is a float32 plan (the compute kernels count the weight gradient's
    blocks in float32, as its partials are)."""
    return compute is not None and getattr(plan, "conv", None) is not None and \
        plan.dtype == _F32


def _compute(plan, compute, n):
    """The :class:`ComputeCall` of ``plan`` for ``n`` images on ``compute`` (see
    :func:`runs_compute`), or None where it does not run there.  Its work array is the plan's,
    made once per batch size."""
    if not runs_compute(plan, compute):
        return None
    module, gemm = compute
    tile = plan.tile_rows(_BITS.itemsize)
    nwork = max(1, int(plan.conv.lib.conv_threads()))
    address, gemm_work = gemm_bf16_callee(gemm)
    geom = plan.geom_struct(module, n)
    size = int(module.lib.conv_compute_work_bytes(geom, nwork, tile, gemm_work))
    work = plan.buffer("compute work", (-(-size // _F32.itemsize),), _F32, empty=aligned_empty)
    return ComputeCall(module, geom, address, module.ffi.from_buffer(work), gemm_work, nwork,
                       tile)


def _bits(*arrays):
    return all(a is None or (a.dtype == _BITS and a.flags.c_contiguous) for a in arrays)


def _direct(plan, transposed):
    """(DirectWork of the pass, its float32 work array, on a cache line as the kernels' parts
    of it are): the slices of padded images and staging rows, and the widened filter and bias
    at its head (``conv_direct_bf16_work_size``, independent of the batch)."""
    direct = plan.direct_transposed if transposed else plan.direct
    size = int(direct.module.lib.conv_direct_bf16_work_size(direct.geom, direct.nwork))
    return direct, plan.buffer(f"direct bf16 work {transposed}", (size,), plan.dtype,
                               empty=aligned_empty)


def _tiled(plan, n):
    """(cffi module, geom for ``n`` images, float32 work array on a cache line) of the tiled
    passes: the widened filter and bias, then each thread's patches, staged rows and image
    (``conv_tiled_bf16_work_size``)."""
    lib, geom = plan.conv.lib, plan.geom_for(n)
    size = int(lib.conv_tiled_bf16_work_size(geom, plan.tiles.nwork, plan.tiles.tile))
    return plan.conv, geom, plan.buffer("tiled bf16 work", (size,), plan.dtype,
                                        empty=aligned_empty)


def _pointer(ffi, a):
    return ffi.NULL if a is None else ffi.cast("uint16_t *", a.ctypes.data)


def fprop(plan, x, f, o, bias=None, relu=False, compute=None):
    """o (N, P, Q, K) = conv(x (N, H, W, C), f (R, S, C, K)) (+ bias (K,), ReLU), all bf16."""
    if not _bits(x, f, o, bias):
        return False
    call = _compute(plan, compute, x.shape[0])
    if call is not None:
        return call.run("fprop", (x, f, o), _pointer(call.module.ffi, bias), int(bool(relu)))
    if plan.algorithm not in ("direct", "tiled"):
        return False
    if plan.algorithm == "tiled":
        module, geom, work = _tiled(plan, x.shape[0])
        ffi = module.ffi
        module.lib.conv_fprop_tiled_bf16(
            _pointer(ffi, x), _pointer(ffi, f), _pointer(ffi, o), geom, plan.tiles.gemm_address,
            ffi.from_buffer("real[]", work), plan.tiles.nwork, plan.tiles.tile,
            _pointer(ffi, bias), int(bool(relu)))
        return True
    direct, work = _direct(plan, False)
    direct.geom.N = x.shape[0]
    ffi = direct.module.ffi
    direct.module.lib.conv_direct_bf16(_pointer(ffi, x), _pointer(ffi, f), _pointer(ffi, o),
                                       direct.geom, ffi.from_buffer("real[]", work),
                                       direct.nwork, 0.0, _pointer(ffi, bias), int(bool(relu)))
    return True


def bprop(plan, f, e, grad_x, beta=0.0, compute=None):
    """grad_x (N, H, W, C) = beta * grad_x + the data gradient of e (N, P, Q, K) through f,
    all bf16: direct, the forward convolution of e with the filters flipped and transposed
    (their bits moved into a bf16 buffer of the plan); tiled (and compute), each image's
    patches summed in float32; rounded once per element either way."""
    if not _bits(f, e, grad_x):
        return False
    call = _compute(plan, compute, e.shape[0])
    if call is not None:
        return call.run("bprop", (e, f, grad_x), beta)
    if plan.bprop_algorithm not in ("direct", "tiled"):
        return False
    if plan.bprop_algorithm == "tiled":
        module, geom, work = _tiled(plan, e.shape[0])
        ffi = module.ffi
        module.lib.conv_bprop_tiled_bf16(
            _pointer(ffi, e), _pointer(ffi, f), _pointer(ffi, grad_x), geom,
            plan.tiles.gemm_address, ffi.from_buffer("real[]", work), plan.tiles.nwork,
            plan.tiles.tile, beta)
        return True
    direct, work = _direct(plan, True)
    direct.geom.N = e.shape[0]
    flipped = plan.buffer("flipped filter bf16", (plan.R, plan.S, plan.K, plan.C), _BITS)
    np.copyto(flipped, f[::-1, ::-1].transpose(0, 1, 3, 2))
    ffi = direct.module.ffi
    direct.module.lib.conv_direct_bf16(_pointer(ffi, e), _pointer(ffi, flipped),
                                       _pointer(ffi, grad_x), direct.geom,
                                       ffi.from_buffer("real[]", work), direct.nwork, beta,
                                       ffi.NULL, 0)
    return True


def update(plan, x, e, grad_f, beta=0.0, compute=None):
    """grad_f (R, S, C, K) = beta * grad_f + patches(x)^T @ e, all bf16 (the partial sums
    float32, added in double, rounded once)."""
    if not _bits(x, e, grad_f):
        return False
    call = _compute(plan, compute, x.shape[0])
    if call is not None:
        partials = plan.buffer("tile partials",
                               (plan.update_blocks * plan.R * plan.S * plan.C * plan.K,), _F32)
        return call.run("update", (x, e, grad_f), call.module.ffi.from_buffer("float[]", partials),
                        beta)
    if plan.algorithm not in ("direct", "tiled"):
        return False
    partials = plan.buffer("direct partials" if plan.algorithm == "direct" else
                           "tile partials",
                           (plan.update_blocks * plan.R * plan.S * plan.C * plan.K,), plan.dtype)
    if plan.algorithm == "tiled":
        module, geom, work = _tiled(plan, x.shape[0])
        ffi = module.ffi
        module.lib.conv_update_tiled_bf16(
            _pointer(ffi, x), _pointer(ffi, e), _pointer(ffi, grad_f), geom,
            plan.tiles.gemm_address, ffi.from_buffer("real[]", work),
            ffi.from_buffer("real[]", partials), plan.tiles.nwork, plan.tiles.tile, beta)
        return True
    direct, work = _direct(plan, False)
    direct.geom.N = x.shape[0]
    ffi = direct.module.ffi
    direct.module.lib.conv_direct_update_bf16(_pointer(ffi, x), _pointer(ffi, e),
                                              _pointer(ffi, grad_f), direct.geom,
                                              ffi.from_buffer("real[]", work),
                                              ffi.from_buffer("real[]", partials),
                                              direct.nwork, beta)
    return True


def bf16_arrays(*tensors):
    """The arrays of ``tensors`` (None stays None) where every tensor given is bf16, else
    None (the fused calls leave the case to the boundary's general path)."""
    if not all(t is None or is_bf16_tensor(t) for t in tensors):
        return None
    return [None if t is None else t._ary for t in tensors]
