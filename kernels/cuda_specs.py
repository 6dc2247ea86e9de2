"""The GPU backend's rows of the kernel-variant table (``specs.py`` holds the table and its
``find``): one variant per
``kernels/cuda/*.cu`` source; each holds the float32, float16 and bfloat16 entry points named
in ``functions`` (for a source whose kernels are all ``NL_THREE_TYPES`` instances, read from
the source, so a kernel added there needs no edit here).  The op-tree kernels are generated (``backends/gpu/codegen.py``) and built by
``backends/gpu/build.py`` through the same cache, so they are not listed here."""
import re
from dataclasses import dataclass

from .kernel_spec import KERNEL_ROOT, KernelSpec

_THREE = ("f32", "f16", "bf16")


def _typed(*stems):
    return tuple(f"{stem}_{t}" for stem in stems for t in _THREE)


def _declared(source):
    """The entry points of ``source`` (relative to ``kernels/``): one per type of each
    ``NL_THREE_TYPES(prefix, ...)`` line, in the source's order."""
    text = (KERNEL_ROOT / source).read_text()
    return _typed(*re.findall(r"^NL_THREE_TYPES\((\w+),", text, re.M))


def _three_typed(name, threads):
    """The variant of ``cuda/<name>.cu``, whose kernels are all ``NL_THREE_TYPES``."""
    source = f"cuda/{name}.cu"
    return KernelSpec(name, "cuda", source, threads=threads, functions=_declared(source))


CUDA_VARIANTS = (
    KernelSpec("philox", "cuda", "cuda/philox.cu", threads=256,
               functions=_typed("nl_uniform") + _typed("nl_example_mask")
               + ("nl_philox_words",)),
    _three_typed("im2col", 256),
    _three_typed("pool", 256),
    KernelSpec("rows", "cuda", "cuda/rows.cu", threads=256,
               functions=tuple(f"{k}_{t}_{i}" for k in ("nl_take_rows", "nl_scatter_add_rows")
                               for t in _THREE for i in ("i32", "i64", "f32"))),
    _three_typed("softmax", 256),
    _three_typed("norm", 256),
    _three_typed("blocksparse", 128),
    _three_typed("recurrent", 256),
    _three_typed("lrn", 256),
    KernelSpec("flash_attention", "cuda", "cuda/flash_attention.cu", threads=128,
               functions=tuple(f"{f}_{shape}_{t}" for shape in ("t32d64", "t16d128")
                               for f in ("nl_fa_fprop", "nl_fa_bprop_kv", "nl_fa_bprop_q")
                               for t in _THREE)),
    KernelSpec("transpose", "cuda", "cuda/transpose.cu", threads=256,
               functions=("nl_transpose_b32", "nl_transpose_b16")),
    KernelSpec("conv_simt", "cuda", "cuda/conv_simt.cu", threads=256,
               functions=tuple(f"nl_conv_{p}_simt{t}_f32{v}" for p in ("fprop", "bprop", "update")
                               for t in ("32x32", "64x64", "128x64") for v in ("", "_v4"))
               + _typed("nl_conv_splitk_reduce")),
    KernelSpec("conv_tc", "cuda", "cuda/conv_tc.cu", threads=128,
               functions=tuple(f"nl_conv_{p}_tc{t}_{k}{v}" for p in ("fprop", "bprop", "update")
                               for t in ("64x64", "128x128") for k in ("f16", "bf16")
                               for v in ("", "_v8"))),
)


@dataclass(frozen=True)
class ConvTile:
    """A tile of the implicit-GEMM convolution kernels: ``path`` 'tc' (tensor cores,
    float16/bfloat16) or 'simt' (float32); block tile bm x bn x bk and threads per block.
    ``backends/gpu_conv.py`` takes the first row of :data:`CONV_TILES` of the path whose
    thresholds the pass's GEMM (M, Ng) meets."""
    path: str
    bm: int
    bn: int
    bk: int
    threads: int
    min_mn: int
    min_ng: int


# Shape -> tile: big GEMMs (a ResNet stage at batch 64: M*Ng in the millions) take the large
# tiles, small or narrow ones (LeNet, C=3 inputs, the update pass's R*S*C x K) the small ones
# so the grid still covers the GPU.
CONV_TILES = (
    ConvTile("tc", 128, 128, 32, 128, min_mn=1 << 21, min_ng=128),
    ConvTile("tc", 64, 64, 32, 128, min_mn=0, min_ng=0),
    ConvTile("simt", 128, 64, 16, 256, min_mn=1 << 20, min_ng=64),
    ConvTile("simt", 64, 64, 16, 256, min_mn=1 << 14, min_ng=33),
    ConvTile("simt", 32, 32, 16, 256, min_mn=0, min_ng=0),
)
# Split a pass's K range over the grid's z axis until it has about this many blocks.
CONV_SPLIT_TARGET_BLOCKS = 264

