"""The kernel build system: cache keys and hits, the checksummed entry format, corrupted entries,
concurrent builds, compile errors, ``NEONLITE_CACHE_DIR``, the CLI, nvcc, and the CPU backend's
numpy-only fallback where no C compiler exists.

C builds use a tiny kernel in a temporary folder (so each compiles in about a second) and a
temporary cache directory.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from neonlite.kernels import cache as kcache
from neonlite.cli import kernels as cli
from neonlite.kernels import specs
from neonlite.kernels.build import Builder
from neonlite.kernels.toolchain import (CompileError, CompilerNotFound, find_c_compiler,
                                        find_nvcc, parse_ptxas)
from support.requires import requires


def _missing(find):
    try:
        find()
    except CompilerNotFound as err:
        return str(err)
    return None


NO_CC = _missing(find_c_compiler)
NO_NVCC = _missing(find_nvcc)
needs_cc = requires("compiler")
needs_nvcc = requires("nvcc")

HEADER = "void axpb(const real *x, real *y, int64_t n, double a, double b);\n"
SOURCE = textwrap.dedent("""\
    #include <stdint.h>
    #include "helper.h"
    typedef DTYPE real;
    void axpb(const real *x, real *y, int64_t n, double a, double b)
    {
        for (int64_t i = 0; i < n; i++)
            y[i] = (real)(a * x[i]) + (real)OFFSET(b);
    }
    """)


def write_kernel(folder, helper="#define OFFSET(b) (b)\n", source=SOURCE):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "axpb.h").write_text(HEADER)
    (folder / "axpb.c").write_text(source)
    (folder / "helper.h").write_text(helper)
    return specs.KernelSpec("axpb_f64", "cpu", "axpb.c", (("DTYPE", "double"),),
                            header="axpb.h", root=folder)


def call_axpb(module):
    x = np.arange(5, dtype=np.float64)
    y = np.empty_like(x)
    ffi = module.ffi
    module.lib.axpb(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", y), 5, 2.0, 1.0)
    return y


@pytest.fixture
def kernel(tmp_path):
    return write_kernel(tmp_path / "src")


@pytest.fixture
def cache_root(tmp_path):
    return tmp_path / "cache"


# ---- the entry format --------------------------------------------------------------------------
def test_entry_roundtrip_and_damage_detected():
    data = kcache.pack_entry(b"\x7fELF payload", {"key": "k"})
    assert kcache.unpack_entry(data) == (b"\x7fELF payload", {"key": "k"})
    for damaged in (data[:-1], data[:10], data[1:], b"",
                    data[:3] + bytes([data[3] ^ 1]) + data[4:], data + b"x"):
        with pytest.raises(kcache.CorruptEntry):
            kcache.unpack_entry(damaged)


def test_source_closure_follows_includes(kernel):
    names = [name for name, _ in kcache.source_closure(kernel.source_path)]
    assert names == ["axpb.c", "helper.h"]


def test_cache_dir_honours_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert kcache.cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("NEONLITE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kcache.cache_dir() == tmp_path / "xdg" / "neonlite" / "kernels"


# ---- building C ------------------------------------------------------------------------------
@needs_cc
def test_cache_hit_without_recompiling(kernel, cache_root):
    first = Builder(cache_root)
    np.testing.assert_array_equal(call_axpb(first.load_cpu(kernel)), 2 * np.arange(5) + 1)
    assert first.stats["compiled"] == 1
    first.load_cpu(kernel)
    assert (first.stats["compiled"], first.stats["memory_hits"]) == (1, 1)

    second = Builder(cache_root)
    np.testing.assert_array_equal(call_axpb(second.load_cpu(kernel)), 2 * np.arange(5) + 1)
    assert (second.stats["compiled"], second.stats["disk_hits"]) == (0, 1)
    entries = [p for p in cache_root.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and entries[0].name.startswith("axpb_f64-")


@needs_cc
def test_key_covers_includes_and_defines(kernel, cache_root, tmp_path):
    builder = Builder(cache_root)
    key = builder.cpu_key(kernel)
    assert builder.cpu_key(kernel) == key
    changed = write_kernel(tmp_path / "src", helper="#define OFFSET(b) (2 * (b))\n")
    assert builder.cpu_key(changed) != key
    other_dtype = specs.KernelSpec("axpb_f64", "cpu", "axpb.c", (("DTYPE", "float"),),
                                   header="axpb.h", root=kernel.root)
    assert builder.cpu_key(other_dtype) != builder.cpu_key(changed)
    np.testing.assert_array_equal(call_axpb(Builder(cache_root).load_cpu(changed)),
                                  2 * np.arange(5) + 2)


@needs_cc
@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupted_entry_is_detected_and_rebuilt(kernel, cache_root, damage):
    path, _, compiled = Builder(cache_root).ensure_cpu(kernel)
    assert compiled
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    else:
        path.write_bytes(b"not a kernel")
    builder = Builder(cache_root)
    assert builder.status(kernel)[0] is False
    np.testing.assert_array_equal(call_axpb(builder.load_cpu(kernel)), 2 * np.arange(5) + 1)
    assert (builder.stats["corrupt"], builder.stats["compiled"]) == (1, 1)
    kcache.unpack_entry(path.read_bytes())


def _build_at_once(root, cache, barrier, results):
    spec = write_kernel(Path(root))
    barrier.wait()
    builder = Builder(cache)
    y = call_axpb(builder.load_cpu(spec))
    results.put((y.tolist(), builder.stats["compiled"]))


@needs_cc
def test_concurrent_builds_both_end_with_a_good_kernel(kernel, cache_root):
    ctx = multiprocessing.get_context("spawn")
    n = 3
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_build_at_once, args=(str(kernel.root), str(cache_root), barrier,
                                                       results)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * n
    outcomes = [results.get(timeout=5) for _ in range(n)]
    assert all(y == [1.0, 3.0, 5.0, 7.0, 9.0] for y, _ in outcomes)
    entries = [p for p in cache_root.iterdir()]
    assert len(entries) == 1, entries
    kcache.unpack_entry(entries[0].read_bytes())
    assert Builder(cache_root).ensure_cpu(kernel)[2] is False


@needs_cc
def test_compile_error_carries_numbered_source_and_log(tmp_path, cache_root):
    bad = SOURCE.replace("y[i] =", "y[i] = undeclared_name +")
    spec = write_kernel(tmp_path / "bad", source=bad)
    with pytest.raises(CompileError) as info:
        Builder(cache_root).load_cpu(spec)
    err = info.value
    text = str(err)
    line = next(i for i, s in enumerate(bad.splitlines(), 1) if "undeclared_name" in s)
    assert f"{line} |         y[i] = undeclared_name" in text
    assert "undeclared_name" in err.log and "error" in err.log.lower()
    assert err.command[0] == find_c_compiler().command[0] and err.returncode != 0
    assert not cache_root.exists() or not list(cache_root.iterdir())


@needs_cc
def test_default_builder_follows_neonlite_cache_dir(kernel, monkeypatch, tmp_path):
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "moved"))
    builder = Builder()
    builder.ensure_cpu(kernel)
    assert [p.name.split("-")[0] for p in (tmp_path / "moved").iterdir()] == ["axpb_f64"]


def test_missing_compiler_is_reported(monkeypatch):
    monkeypatch.setenv("NEONLITE_CC", "/nonexistent/neonlite-cc")
    with pytest.raises(CompilerNotFound, match="NEONLITE_CC"):
        find_c_compiler()


FALLBACK_SCRIPT = textwrap.dedent("""\
    import numpy as np
    from neonlite.backends.cpu.backend import CPUBackend
    from neonlite.backends.reference import conv as numpy_conv
    be = CPUBackend(batch_size=2, rng_seed=0)
    rng = np.random.default_rng(0)
    x = be.array(rng.standard_normal((2, 5, 6, 3)))
    f = be.array(rng.standard_normal((3, 3, 3, 4)))
    plan = be.conv_layer(2, 3, 5, 6, 4, 3, 3, pad=(1, 1))
    out = be.empty(plan.out_shape)
    be.fprop_conv(plan, x, f, out)
    ref = np.empty(plan.out_shape, np.float32)
    numpy_conv.fprop_conv(be.conv_layer(2, 3, 5, 6, 4, 3, 3, pad=(1, 1)), x.get(), f.get(), ref)
    assert np.allclose(out.get(), ref, atol=1e-5)
    pool = be.pool_layer("max", 2, 4, 5, 6, 2, 2)
    pooled = be.empty(pool.out_shape)
    be.fprop_pool(pool, out, pooled)
    y = be.empty(pooled.shape)
    y[:] = be.maximum(pooled, 0.0) * 2.0 + 1.0
    assert np.allclose(y.get(), np.maximum(pooled.get(), 0) * 2 + 1)
    assert not be.kernels.active()
    print("ok")
    """)


def test_cpu_backend_falls_back_to_numpy_without_a_compiler(tmp_path):
    env = dict(os.environ, NEONLITE_CC="/nonexistent/neonlite-cc",
               NEONLITE_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", FALLBACK_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "without its compiled kernels" in lines[0] and "NEONLITE_CC" in lines[0]
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


# ---- the CLI ---------------------------------------------------------------------------------
def kernels_command(argv):
    """``neonlite kernels ARGV...``: its exit status."""
    from neonlite.cli import main
    return main(["kernels", *argv])


@needs_cc
def test_cli_build_list_clean(kernel, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "cli-cache"))
    monkeypatch.setattr(specs, "variants", lambda target=None: (kernel,))
    assert kernels_command(["list"]) == 0
    assert "not cached" in capsys.readouterr().out
    assert kernels_command(["build", "--target", "cpu", "-j", "2"]) == 0
    assert "built  axpb_f64" in capsys.readouterr().out
    assert kernels_command(["build"]) == 0
    assert "cached  axpb_f64" in capsys.readouterr().out
    assert kernels_command(["list"]) == 0
    listing = capsys.readouterr().out
    assert "axpb_f64" in listing and "not cached" not in listing
    assert kernels_command(["clean"]) == 0
    assert "removed 1" in capsys.readouterr().out
    assert kernels_command(["list"]) == 0
    assert "not cached" in capsys.readouterr().out


@needs_cc
def test_cli_build_reports_a_compile_error(tmp_path, monkeypatch, capsys):
    spec = write_kernel(tmp_path / "bad", source=SOURCE.replace("for", "fro"))
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "cli-cache"))
    monkeypatch.setattr(specs, "variants", lambda target=None: (spec,))
    assert kernels_command(["build"]) == 1
    captured = capsys.readouterr()
    assert "FAILED  axpb_f64" in captured.out
    assert "--- compiler log ---" in captured.err and "--- source ---" in captured.err


def test_cli_rejects_bad_flags(capsys):
    for argv in (["build", "--arch", "80"], ["build", "-j", "0"], ["frobnicate"]):
        with pytest.raises(SystemExit) as info:
            kernels_command(argv)
        assert info.value.code == 2
    assert "expected CUDA archs like 'sm_80,sm_90'" in capsys.readouterr().err


def test_register_adds_the_kernels_subcommand():
    import argparse
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["kernels", "build", "--target", "cuda", "--arch", "sm_80,sm_90",
                              "-j", "3"])
    assert (args.target, args.arch, args.jobs, args.func) == ("cuda", ("sm_80", "sm_90"), 3,
                                                              cli.run)


def test_table_is_consistent():
    table = specs.variants()
    names = [s.name for s in table]
    assert len(names) == len(set(names))
    for spec in table:
        assert spec.source_path.is_file(), spec
        if spec.target == "cpu":
            assert spec.header_path.is_file(), spec
    for spec in specs.CPU_VARIANTS:
        uint8 = spec.source_path.stem in specs.UINT8_SOURCES
        assert spec.define("DTYPE") in (("uint8_t",) if uint8 else ("float", "double")), spec
    for spec in specs.BF16_VARIANTS:
        assert spec.define("DTYPE") == "float", spec
    for spec in specs.JPEG_VARIANTS:
        assert spec.define("DTYPE") is None and spec.libraries, spec
    assert specs.cpu_variant("pool", np.dtype(np.float64)).name == "pool_f64"
    with pytest.raises(ValueError, match="target"):
        specs.KernelSpec("x", "tpu", "x.c")


# ---- CUDA ------------------------------------------------------------------------------------
PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'scale_f32' for 'sm_80'
ptxas info    : Function properties for scale_f32
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]
"""


def test_parse_ptxas():
    assert parse_ptxas(PTXAS_LOG) == {"scale_f32": {"registers": 40, "shared": 2048,
                                                    "spill_stores": 4, "spill_loads": 12,
                                                    "stack": 8}}


@needs_nvcc
def test_cuda_variant_builds_to_a_cubin_with_ptxas_info(tmp_path, cache_root):
    src = tmp_path / "cu"
    src.mkdir()
    (src / "scale.cu").write_text(textwrap.dedent("""\
        extern "C" __global__ void scale_f32(float *x, int n)
        {
            __shared__ float tile[SHARED];
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            tile[threadIdx.x % SHARED] = i < n ? x[i] : 0.f;
            __syncthreads();
            if (i < n) x[i] = 2.f * tile[threadIdx.x % SHARED];
        }
        """))
    spec = specs.KernelSpec("scale", "cuda", "scale.cu", (("SHARED", 64),), threads=128,
                            functions=("scale_f32",), root=src)
    binary = Builder(cache_root).cuda_binary(spec, "sm_80")
    assert binary.cubin[:4] == b"\x7fELF"
    assert binary.info["scale_f32"]["shared"] == 256 and binary.info["scale_f32"]["registers"] > 0
    again = Builder(cache_root)
    assert again.cuda_binary(spec, "sm_80").cubin == binary.cubin
    assert (again.stats["disk_hits"], again.stats["compiled"]) == (1, 0)
    cached, meta = again.status(spec, "sm_80")
    assert cached and meta["threads"] == 128 and meta["ptxas"]["scale_f32"]["shared"] == 256
    broken = specs.KernelSpec("scale", "cuda", "scale.cu", (), root=src)
    with pytest.raises(CompileError, match="SHARED"):
        Builder(cache_root).cuda_binary(broken, "sm_80")
    assert json.loads(json.dumps(meta))["arch"] == "sm_80"


def _variants_the_gpu_backend_loads():
    """Every table variant the GPU backend hands to ``GPUBackend.kernel``: the names in its
    ``kernel("...")`` calls and the ``kernel.cuda_variant`` of each op-table row that
    ``run_op`` launches itself (a row with ``launches``)."""
    import re
    from neonlite.backends.ops import OPS
    folder = Path(specs.__file__).resolve().parents[1] / "backends" / "gpu"
    named = {m for f in folder.glob("*.py")
             for m in re.findall(r'\bkernel\("([a-z_0-9]+)"', f.read_text())}
    return sorted(named | {op.kernel.cuda_variant for op in OPS.values()
                           if op.kernel is not None and op.kernel.launches})


def test_every_variant_the_gpu_backend_loads_is_in_the_table():
    """``gpu.build.variant_cubin`` looked its variant up with a function the table module does
    not have, so every hand-written CUDA kernel failed on the first H200 run; the host
    emulator compiles the sources itself and never went through it."""
    names = _variants_the_gpu_backend_loads()
    assert {"conv_simt", "norm", "rows", "softmax", "philox", "pool"} <= set(names)
    for name in names:
        assert specs.find(name).target == "cuda"


@needs_nvcc
def test_variant_cubin_builds_a_table_variant(monkeypatch, tmp_path):
    from neonlite.backends.gpu import build as gpu_build
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(tmp_path / "cache"))
    cubin = gpu_build.variant_cubin("transpose", "sm_80")
    assert cubin[:4] == b"\x7fELF"
