"""Compiling the GPU backend's kernels through the kernel build system (``neonlite.kernels``).

Hand-written kernels are variants of the table (``kernels/cuda_specs.py``) and are built by the
builder itself.  Generated op-tree kernels are sources in memory: :func:`generated_cubin` keys
them exactly as the builder keys a variant (hash of the source, its includes, the flags, the
arch and nvcc's version) and keeps them in the same disk cache, written atomically with a
checksum, so ``neonlite kernels clean`` clears them too.
"""
from pathlib import Path

from ...atomic import scratch_folder
from ...kernels import build as _build
from ...kernels import specs as kernel_specs
from ...kernels.cache import CorruptEntry, cache_key, entry_name, source_closure
from ...kernels.specs import KERNEL_ROOT
from ...kernels.toolchain import CUDA_FLAGS, find_nvcc

CUDA_INCLUDE = KERNEL_ROOT / "cuda"


def variant_cubin(name, arch, builder=None):
    """The cubin bytes of table variant ``name`` (a CUDA row of ``kernels.specs``, listed in
    ``cuda_specs``) for ``arch``."""
    builder = builder or _build.default_builder()
    return builder.cuda_binary(kernel_specs.find(name), arch).cubin


def generated_key(name, source, arch, nvcc):
    return cache_key({"target": "cuda", "variant": name,
                      "sources": source_closure(CUDA_INCLUDE / f"{name}.cu", text=source),
                      "defines": (), "flags": CUDA_FLAGS, "arch": arch,
                      "compiler": nvcc.version})


def generated_cubin(name, source, arch, builder=None):
    """The cubin of generated CUDA ``source`` (kernel ``name``) for ``arch``: from the disk
    cache, or compiled by nvcc (``CompileError`` with the numbered source on failure)."""
    builder = builder or _build.default_builder()
    nvcc = find_nvcc()
    key = generated_key(name, source, arch, nvcc)
    filename = entry_name(name, key, ".cubin", arch)
    try:
        entry = builder.cache.read(filename)
    except CorruptEntry:
        entry = None
    if entry is not None and entry[1].get("key") == key:
        return entry[0]
    with scratch_folder("neonlite-optree-") as tmp:
        cu = Path(tmp) / f"{name}.cu"
        cu.write_text(source)
        out = Path(tmp) / f"{name}.cubin"
        log = nvcc.compile_cubin(name, cu, out, arch, [CUDA_INCLUDE])
        payload = out.read_bytes()
    builder.cache.write(filename, payload, {"variant": name, "target": "cuda", "key": key,
                                            "arch": arch, "compiler": nvcc.version,
                                            "generated": True, "log": log[-4000:]})
    return payload
