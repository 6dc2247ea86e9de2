"""The GPU backend's rows of the kernel-variant table (see ``specs.py``): one variant per
``kernels/cuda/*.cu`` source; each holds the float32, float16 and bfloat16 entry points named
in ``functions``.  The op-tree kernels are generated (``backends/cuda_codegen.py``) and built by
``backends/gpu_build.py`` through the same cache, so they are not listed here."""
from .specs import KernelSpec

_THREE = ("f32", "f16", "bf16")


def _typed(*stems):
    return tuple(f"{stem}_{t}" for stem in stems for t in _THREE)


CUDA_VARIANTS = (
    KernelSpec("philox", "cuda", "cuda/philox.cu", threads=256,
               functions=_typed("nl_uniform") + ("nl_philox_words",)),
    KernelSpec("im2col", "cuda", "cuda/im2col.cu", threads=256,
               functions=_typed("nl_im2col", "nl_col2im")),
    KernelSpec("pool", "cuda", "cuda/pool.cu", threads=256,
               functions=_typed("nl_pool_fprop", "nl_pool_bprop")),
    KernelSpec("rows", "cuda", "cuda/rows.cu", threads=256,
               functions=tuple(f"{k}_{t}_{i}" for k in ("nl_take_rows", "nl_scatter_add_rows")
                               for t in _THREE for i in ("i32", "i64", "f32"))),
    KernelSpec("softmax", "cuda", "cuda/softmax.cu", threads=256,
               functions=_typed("nl_masked_softmax")),
    KernelSpec("transpose", "cuda", "cuda/transpose.cu", threads=256,
               functions=("nl_transpose_b32", "nl_transpose_b16")),
)


def find(name):
    """The CUDA variant called ``name``; ``KeyError`` lists the known ones."""
    for spec in CUDA_VARIANTS:
        if spec.name == name:
            return spec
    raise KeyError(f"no CUDA kernel variant {name!r}; known: "
                   f"{', '.join(s.name for s in CUDA_VARIANTS)}")
