"""Choosing and launching the implicit-GEMM convolution kernels (``kernels/cuda/conv_*.cu``).

Each pass of a convolution is a GEMM out (M, Ng) = A (M, Kd) @ B (Kd, Ng) gathered from the
NHWC tensors (``conv_igemm.cuh``):

=========  ===========  ====  ===========  ===========================
pass       M            Ng    Kd           out
=========  ===========  ====  ===========  ===========================
fprop      N*P*Q        K     R*S*C        O (N, P, Q, K)
bprop      N*H*W        C     R*S*K        grad_I (N, H, W, C)
update     R*S*C        K     N*P*Q        grad_F (R, S, C, K)
=========  ===========  ====  ===========  ===========================

:func:`conv_launch` picks, once per plan, pass and storage type, the kernel path (tensor cores
for float16/bfloat16, CUDA cores for float32), the tile from ``cuda_specs.CONV_TILES`` (first
row whose thresholds the GEMM meets) and a split of the K range over the grid's z axis when
the tiles alone would leave the GPU idle (the update pass: M and Ng small, Kd huge).  It is
pure Python, so the host-emulator tests exercise the very choices the GPU backend makes.
"""
from dataclasses import dataclass

from ...kernels.cuda_specs import CONV_SPLIT_TARGET_BLOCKS, CONV_TILES

PASSES = ("fprop", "bprop", "update")
INT32_LIMIT = 2 ** 31 - 1


def gemm_dims(plan, pass_name):
    """(M, Ng, Kd) of ``pass_name`` for ConvPlan ``plan``."""
    N, C, K = plan.N, plan.C, plan.K
    RS, NPQ = plan.R * plan.S, plan.N * plan.P * plan.Q
    return {"fprop": (NPQ, K, RS * C), "bprop": (N * plan.H * plan.W, C, RS * K),
            "update": (RS * C, K, NPQ)}[pass_name]


def shape_args(plan):
    """The ``nl_conv_shape`` struct's fields, in order (15 ints)."""
    return [int(getattr(plan, n)) for n in ("N", "H", "W", "C", "K", "P", "Q", "R", "S",
                                             "pad_h", "pad_w", "str_h", "str_w", "dil_h",
                                             "dil_w")]


@dataclass(frozen=True)
class ConvLaunch:
    """One pass's kernel: ``function`` (entry point of table variant ``variant``), ``grid``,
    ``block``, ``splits`` (K-range slices; > 1 needs ``work_elems`` float32 of workspace and
    the ``nl_conv_splitk_reduce_<storage>`` pass) and the GEMM extents.  ``vector_function``
    (or None; C and K multiples of 8 for 16-bit storage, of 4 for float32) loads 16 bytes at a
    time; it needs every tensor 16-byte aligned."""
    variant: str
    function: str
    grid: tuple
    block: tuple
    splits: int
    M: int
    Ng: int
    Kd: int
    vector_function: str = None

    @property
    def work_elems(self):
        return self.splits * self.M * self.Ng if self.splits > 1 else 0


def covered(plan):
    """True when every index the kernels compute fits in 32 bits (else the im2col path)."""
    sizes = [plan.N * plan.H * plan.W * plan.C, plan.N * plan.P * plan.Q * plan.K,
             plan.R * plan.S * plan.C * plan.K]
    return max(sizes) <= INT32_LIMIT and all(max(gemm_dims(plan, p)) <= INT32_LIMIT
                                             for p in PASSES)


def conv_launch(plan, pass_name, storage, split_target=CONV_SPLIT_TARGET_BLOCKS,
                tiles=CONV_TILES):
    """The :class:`ConvLaunch` for ``pass_name`` on ``storage`` ('f32', 'f16' or 'bf16'), its
    tile the first of ``tiles`` (the table) that fits."""
    if pass_name not in PASSES:
        raise ValueError(f"convolution pass must be one of {PASSES}, got {pass_name!r}")
    if storage not in ("f32", "f16", "bf16"):
        raise ValueError(f"implicit-GEMM convolution stores float32, float16 or bfloat16, not "
                         f"{storage!r}")
    path = "simt" if storage == "f32" else "tc"
    M, Ng, Kd = gemm_dims(plan, pass_name)
    tile = next(t for t in tiles if t.path == path and M * Ng >= t.min_mn
                and Ng >= t.min_ng)
    blocks = -(-Ng // tile.bn) * -(-M // tile.bm)
    k_tiles = -(-Kd // tile.bk)
    splits = 1
    if blocks < split_target and k_tiles >= 8:
        splits = max(1, min(-(-split_target // blocks), k_tiles // 4, 64))
        per = -(-k_tiles // splits)
        splits = -(-k_tiles // per)
    name = f"nl_conv_{pass_name}_{path}{tile.bm}x{tile.bn}_{storage}"
    width = 8 if path == "tc" else 4
    vector = f"{name}_v{width}" if plan.C % width == 0 and plan.K % width == 0 else None
    return ConvLaunch(f"conv_{path}", name, (-(-Ng // tile.bn), -(-M // tile.bm), splits),
                      (tile.threads, 1, 1), splits, M, Ng, Kd, vector)


def function_for(launch, *pointers):
    """The entry point to launch: the 8-wide one when it exists and every pointer is 16-byte
    aligned."""
    if launch.vector_function and all(int(p) % 16 == 0 for p in pointers):
        return launch.vector_function
    return launch.function
