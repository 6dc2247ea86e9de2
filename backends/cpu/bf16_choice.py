"""Which path bf16-stored data takes on this machine, per op class, chosen by measurement.

For each op class of the op table (a row's ``bf16_class``: ``gemm``, ``conv``,
``attention``) the path is

* ``compute``: bf16 arithmetic (the bf16 kernels; see ``bf16_kernels.py``),
* ``storage``: bf16 in memory, float32 arithmetic (operands widened while the kernels load
  them, or into float32 copies for the float32 kernels),
* ``off``: no bf16 at all (``NEONLITE_BF16=off``; ``-d bf16`` is refused on the CPU).

``NEONLITE_BF16=compute|storage|off`` decides for every class (``compute`` where the CPU has no
bf16 kernel falls back to ``storage`` and says why: a bf16 instruction never runs on a CPU
without it). Otherwise, at first use on a machine, :func:`measure_gemm` times the bf16 GEMM
against the storage path's GEMM on the same bf16 operands, on one core (:data:`SHAPE`,
interleaved short bursts, the shortest of each), and ``compute`` wins only by :data:`MARGIN`;
the result is kept in the kernel cache (:class:`~neonlite.kernels.cache.DiskCache`, one JSON
entry) under a key made like the kernels' (the bf16 GEMM variant's key: its sources, flags,
compiler and CPU target) plus the float32 GEMM's kind and the usable cores, so a new compiler,
CPU, BLAS or core count measures again.  ``conv`` is measured the same way, on one
convolution's forward pass (:data:`CONV_SHAPE`): its compute path (each tile's product on the
bf16 GEMM, ``conv_bf16.py``) against the storage path's direct or tiled pass (where either
cannot run that shape here, it takes the GEMM's path).  ``attention`` (its compute path:
``attention_compute.c``, the products on the bf16 GEMM) is not measured yet: it takes
``storage`` unless ``NEONLITE_BF16=compute`` asks, and says so.
"""
import contextlib
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..ops import OPS
from .blas import blas_threads
from .bf16_kernels import BF16, F32, fused_storage_module, gemm_bf16, gemm_module, \
    gemm_storage, gemm_storage_fused, gemm_variant, storage_isa
from .bf16_packed import SharedArea, gemm_storage_packed, packed_storage_module
from .conv import CPUConvPlan
from .conv_bf16 import fprop as conv_fprop_bf16
from .threads import openmp_threads, set_cpu_threads, usable_cores
from ...kernels.cache import CorruptEntry, cache_key, entry_name
from ...kernels.specs import find

#: the variable that overrides the measured choice
ENV = "NEONLITE_BF16"
PATHS = ("compute", "storage", "off")
#: the op classes, from the op table's rows
OP_CLASSES = tuple(sorted({op.bf16_class for op in OPS.values() if op.bf16_class}))
#: the op classes with a bf16 kernel (the others always take "storage")
WITH_KERNELS = ("attention", "conv", "gemm")
#: what a convolution's compute and storage paths are, in words
CONV_COMPUTE = "its tiles' products on the bf16 GEMM"
CONV_STORAGE = "float32 arithmetic on operands widened as the kernels read them"
ATTENTION_COMPUTE = "its products on the bf16 GEMM, the softmax in float32"
#: the measured product (m, n, k), both paths on one thread (the choice compares one core's
#: arithmetic), in bursts short enough to fit between other processes' time slices on a busy
#: machine (the shortest burst of each path counts: noise only adds time)
SHAPE = (256, 256, 256)
BURSTS = 40
CALLS = 3
#: the measured convolution (N, C, H, W, K, R, S; padded to keep its size): its forward pass on
#: one core, in bursts of one call, the shortest of each path
CONV_SHAPE = (4, 32, 16, 16, 64, 3, 3)
CONV_BURSTS = 10
#: how much faster bf16 arithmetic must be to be chosen (noise must not flip a tie)
MARGIN = 1.05
#: the measurement's cache entry's variant name (the file is bf16_choice-<key>.json)
ENTRY = "bf16_choice"


@dataclass(frozen=True)
class Bf16Choice:
    """The path of each op class (``paths``, with ``reasons``), how it was decided
    (``source``: ``measured``, ``cached``, ``NEONLITE_BF16`` or ``no bf16 kernel``), the bf16
    GEMM variant (None where none runs), and the measured GFLOP/s of the bf16 GEMM and of
    float32 arithmetic on bf16-stored operands, and of the convolution's two paths (None where
    not measured)."""
    paths: dict
    reasons: dict
    source: str
    variant: str = None
    bf16_gflops: float = None
    f32_gflops: float = None
    shape: tuple = field(default=SHAPE)
    #: (bf16, float32) GFLOP/s of the convolution's measured forward pass, or None
    conv_gflops: tuple = None


def requested():
    """``NEONLITE_BF16``'s path, or None when unset; ValueError for another value."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    if value not in PATHS:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(PATHS)}")
    return value


def _one_thread_storage(modules, a, b, c, scratch, area):
    """The storage path's product on one thread: the fused storage GEMM where the storage path
    runs it (:func:`~.bf16_kernels.fused_storage_module`), else MKL's packed GEMM where the
    float32 GEMM is MKL's (:func:`~.bf16_packed.gemm_storage_packed`), else
    :func:`~.bf16_kernels.gemm_storage` with numpy's matmul on one BLAS thread
    (``GemmThreads`` would cut a product over threads of its own).  ``area``: the
    :class:`~.bf16_packed.SharedArea` of the fused GEMM's packing buffers."""
    fused = fused_storage_module(modules)
    if fused is not None:
        return gemm_storage_fused(fused, a, b, c, None, threads=1, area=area)
    packed = packed_storage_module(modules)
    if packed is not None:
        return gemm_storage_packed(modules, packed, a, b, c, None, threads=1)
    lib = getattr(modules.gemm, "lib", None)
    if lib is not None and hasattr(lib, "MKL_Set_Num_Threads_Local"):
        previous = lib.MKL_Set_Num_Threads_Local(1)
        try:
            return gemm_storage(modules, a, b, c, scratch=scratch)
        finally:
            lib.MKL_Set_Num_Threads_Local(previous)
    with blas_threads(1):
        return gemm_storage(modules, a, b, c, scratch=scratch,
                            matmul=lambda x, y, out: np.matmul(x, y, out=out))


def measure_gemm(modules, module, shape=SHAPE, bursts=BURSTS, calls=CALLS):
    """``(bf16 GFLOP/s, float32 GFLOP/s)`` of one core on an (m, n, k) product of bf16
    operands: the bf16 GEMM of ``module`` (one thread) against
    the storage path's GEMM (:func:`_one_thread_storage`), in
    ``bursts`` interleaved bursts of ``calls`` calls each; the
    shortest burst of each path counts."""
    m, n, k = shape
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((m, k), dtype=F32).view(np.uint32) >> 16).astype(BF16)
    b = (rng.standard_normal((k, n), dtype=F32).view(np.uint32) >> 16).astype(BF16)
    c = np.empty((m, n), F32)
    scratch, area = {}, SharedArea()
    runs = {"bf16": lambda: gemm_bf16(module, a, b, c, threads=1, area=area),
            "f32": lambda: _one_thread_storage(modules, a, b, c, scratch, area)}
    for run in runs.values():
        run()  # warm-up: first-call costs (the packing area, MKL's plan, the scratch arrays)
    best = {name: float("inf") for name in runs}
    for _ in range(bursts):
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    flop = 2.0 * m * n * k
    return flop / best["bf16"] / 1e9, flop / best["f32"] / 1e9


def storage_variant(modules):
    """The kernel variant the storage path's products run here (:func:`_one_thread_storage`),
    or None where they widen whole operands for the float32 GEMM."""
    if fused_storage_module(modules) is not None:
        return "gemm_storage"
    return "gemm_packed" if packed_storage_module(modules) is not None else None


def storage_products(modules):
    """What the storage path's products run on here, in words (``neonlite doctor``)."""
    variant = storage_variant(modules)
    if variant == "gemm_storage":
        isa = storage_isa(fused_storage_module(modules))
        return f"products: the fused storage GEMM ({isa}), operands widened while packed"
    if variant == "gemm_packed":
        return "products: MKL's packed GEMM on operand pieces widened in cache"
    return "products: operands widened, then the float32 GEMM"


@contextlib.contextmanager
def _one_core(modules):
    """OpenMP regions, OpenBLAS and MKL started from this thread on one thread during the
    block; OpenMP's and MKL's thread counts restored after it."""
    previous = openmp_threads()
    lib = getattr(modules.gemm, "lib", None)
    mkl = lib if lib is not None and hasattr(lib, "MKL_Set_Num_Threads_Local") else None
    set_cpu_threads(1)
    mkl_previous = mkl.MKL_Set_Num_Threads_Local(1) if mkl is not None else None
    try:
        yield
    finally:
        if mkl is not None:
            mkl.MKL_Set_Num_Threads_Local(mkl_previous)
        set_cpu_threads(previous)


def measure_conv(modules, module, shape=CONV_SHAPE, bursts=CONV_BURSTS):
    """``(bf16 GFLOP/s, float32 GFLOP/s)`` of one core on the forward pass of a convolution
    (``shape``: N, C, H, W, K, R, S, padded to keep H and W) on bf16 operands: the compute path
    (``conv_compute``, its tiles on ``module``'s bf16 GEMM) against the storage path's pass
    (the direct or tiled one the float32 plan chose), in interleaved bursts of one call, the
    shortest of each; None where either path cannot run it here."""
    conv = modules.variant("conv_compute")
    if conv is None:
        return None
    n, c, h, w, k, r, s = shape
    rng = np.random.default_rng(1)
    bits = lambda dims: (rng.standard_normal(dims, dtype=F32).view(np.uint32)  # noqa: E731
                         >> 16).astype(BF16)
    with _one_core(modules):
        plan = CPUConvPlan(n, c, h, w, k, r, s, pad=(r // 2, s // 2), kernels=modules,
                           dtype=F32)
        x, f = bits((n, h, w, c)), bits((r, s, c, k))
        o = np.empty((n, plan.P, plan.Q, k), BF16)
        runs = {"bf16": lambda: conv_fprop_bf16(plan, x, f, o, compute=(conv, module)),
                "f32": lambda: conv_fprop_bf16(plan, x, f, o)}
        if not all(run() for run in runs.values()):  # warm-up: the plan's work arrays
            return None
        best = {name: float("inf") for name in runs}
        for _ in range(bursts):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
    flop = 2.0 * n * plan.P * plan.Q * k * r * s * c
    return flop / best["bf16"] / 1e9, flop / best["f32"] / 1e9


def _key(modules, variant):
    storage = storage_variant(modules)
    return cache_key({"measurement": ENTRY, "kernel": modules.builder.cpu_key(find(variant)),
                      "f32_gemm": type(modules.gemm).__name__, "cores": usable_cores(),
                      "storage_gemm": None if storage is None else
                      modules.builder.cpu_key(find(storage)),
                      "shape": SHAPE, "bursts": BURSTS, "calls": CALLS,
                      "conv": modules.builder.cpu_key(find("conv_compute")),
                      "conv_shape": CONV_SHAPE, "conv_bursts": CONV_BURSTS})


def _cached(modules, variant):
    """``(key, rates)``: the ``(bf16, f32)`` GFLOP/s of the GEMM and of the convolution (or
    None) measured before under this machine's key, else None."""
    key = _key(modules, variant)
    try:
        entry = modules.builder.cache.read(entry_name(ENTRY, key, ".json"))
    except (CorruptEntry, OSError):
        return key, None
    if entry is None or entry[1].get("key") != key:
        return key, None
    try:
        found = json.loads(entry[0].decode())
        conv = found["conv_gflops"]
        return key, ((float(found["bf16_gflops"]), float(found["f32_gflops"])),
                     None if conv is None else (float(conv[0]), float(conv[1])))
    except (ValueError, KeyError, TypeError, IndexError):
        return key, None


def _keep(modules, key, variant, rates):
    gemm, conv = rates
    payload = json.dumps({"bf16_gflops": gemm[0], "f32_gflops": gemm[1],
                          "conv_gflops": None if conv is None else list(conv)}).encode()
    try:
        modules.builder.cache.write(entry_name(ENTRY, key, ".json"), payload,
                                    {"variant": ENTRY, "key": key, "gemm_variant": variant,
                                     "shape": list(SHAPE)})
    except OSError:
        pass  # an untrusted or read-only cache: measured again next time


def choose(modules):
    """The :class:`Bf16Choice` for a :class:`~neonlite.backends.cpu.build.KernelModules`
    (see the module docstring)."""
    return _choose(modules, requested())


def _choose(modules, asked):
    if asked == "off":
        return Bf16Choice({c: "off" for c in OP_CLASSES},
                          {c: f"{ENV}=off" for c in OP_CLASSES}, ENV)
    no_kernel = {c: "storage" for c in OP_CLASSES}
    reasons = {c: "no bf16 kernel for this op class yet: float32 arithmetic" for c in OP_CLASSES
               if c not in WITH_KERNELS}
    reasons["attention"] = ("not measured: float32 arithmetic on bf16 tiles (the flash "
                            f"kernels); {ENV}=compute runs {ATTENTION_COMPUTE}")
    module, why = gemm_module(modules)
    variant = gemm_variant()[0] if module is not None else None
    if asked == "storage" or module is None:
        why_storage = f"{ENV}=storage" if asked == "storage" else why
        if asked == "compute":
            why_storage += f" ({ENV}=compute cannot be met)"
        reasons["gemm"] = f"{why_storage}; {storage_products(modules)}"
        reasons["conv"] = f"{why_storage}; {CONV_STORAGE}"
        reasons["attention"] = f"{why_storage}; float32 arithmetic on bf16 tiles"
        return Bf16Choice(no_kernel, reasons, ENV if asked else "no bf16 kernel", variant)
    if asked == "compute":
        reasons["gemm"] = f"{ENV}=compute ({why})"
        reasons["conv"] = f"{ENV}=compute: {CONV_COMPUTE} ({variant})"
        reasons["attention"] = f"{ENV}=compute: {ATTENTION_COMPUTE} ({variant})"
        return Bf16Choice({**no_kernel, **dict.fromkeys(WITH_KERNELS, "compute")}, reasons, ENV,
                          variant)
    key, found = _cached(modules, variant)
    source = "cached"
    if found is None:
        found = measure_gemm(modules, module), measure_conv(modules, module)
        source = "measured"
        _keep(modules, key, variant, found)
    rates, conv_rates = found
    path = "compute" if rates[0] > MARGIN * rates[1] else "storage"
    storage = storage_variant(modules) or "widened operands"
    reasons["gemm"] = (f"{variant} {rates[0]:.1f} GFLOP/s against float32 arithmetic on bf16 "
                       f"data {rates[1]:.1f} GFLOP/s ({storage}), one core at "
                       f"{'x'.join(map(str, SHAPE))} "
                       f"({source}; compute needs {MARGIN:.2f}x)")
    conv_path = path if conv_rates is None else \
        "compute" if conv_rates[0] > MARGIN * conv_rates[1] else "storage"
    conv_how = f"{CONV_COMPUTE} ({variant})" if conv_path == "compute" else CONV_STORAGE
    reasons["conv"] = (f"as gemm's measurement chose (the convolution's was not possible "
                       f"here): {conv_how}" if conv_rates is None else
                       f"{conv_how}: the forward pass at {'x'.join(map(str, CONV_SHAPE))} "
                       f"{conv_rates[0]:.1f} GFLOP/s compute against {conv_rates[1]:.1f} "
                       f"storage, one core ({source})")
    return Bf16Choice({**no_kernel, "gemm": path, "conv": conv_path}, reasons, source, variant,
                      *rates, conv_gflops=conv_rates)
