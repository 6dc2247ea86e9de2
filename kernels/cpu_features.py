"""What this CPU can run, read once, for the kernels, ``neonlite doctor`` and the CPU peak.

The instruction sets come from the ``flags`` line of ``/proc/cpuinfo``: the CPUID bits as the
operating system reports them, so a flag is listed only where the OS also saves the registers
the instructions use (a kernel without AMX support lists no ``amx_tile``).  On top of that:

* AVX512-BF16 (``VDPBF16PS``, ``VCVTNE2PS2BF16``): flag ``avx512_bf16``;
* the byte vector level of the augmentation's resize (:func:`byte_vector_level`): AVX2, then
  AVX-512 F/BW/VL/VBMI;
* AMX-BF16 (``TDPBF16PS``): flags ``amx_tile`` and ``amx_bf16``, *and* the Linux kernel grants
  this process the AMX tile data state (``arch_prctl(ARCH_REQ_XCOMP_PERM,
  XFEATURE_XTILEDATA)``, Linux 5.16 and later): without that grant the first tile instruction
  faults, so the grant is asked once, before any AMX kernel may be chosen.

Tests simulate a CPU without some of these: ``NEONLITE_CPU_FEATURES_OFF`` lists
``/proc/cpuinfo`` flags (comma or space separated, e.g. ``avx512_bf16,amx_tile``) treated as
absent, read at every call, so a kernel choice made under it never loads a kernel that uses
them (child processes inherit it).
"""
import ctypes
import functools
import os
import re
from pathlib import Path

#: the variable naming the flags treated as absent (see the module docstring)
FEATURES_OFF = "NEONLITE_CPU_FEATURES_OFF"
#: Linux's arch_prctl numbers (arch/x86/include/uapi/asm/prctl.h) and AMX's state component
SYS_ARCH_PRCTL = 158
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def read_cpuinfo(text=None):
    """The first processor's ``/proc/cpuinfo`` fields as a dict (``{}`` when unreadable), plus
    ``mhz``: the mean current clock over all processors (MHz, or None)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return {}
    info = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    clocks = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)]
    info["mhz"] = sum(clocks) / len(clocks) if clocks else None
    return info


@functools.lru_cache(maxsize=None)
def _machine_flags():
    return frozenset(read_cpuinfo().get("flags", "").split())


def forced_off():
    """The flags ``NEONLITE_CPU_FEATURES_OFF`` names (a set, empty when unset)."""
    return set(re.split(r"[,\s]+", os.environ.get(FEATURES_OFF, "").strip())) - {""}


def cpu_flags(info=None):
    """This CPU's instruction-set flags (``info``: fields of :func:`read_cpuinfo`, default this
    machine's), less those :func:`forced_off` names."""
    flags = _machine_flags() if info is None else frozenset(info.get("flags", "").split())
    return set(flags) - forced_off()


#: the flags of each level of :func:`byte_vector_level` (1: AVX2; 2: AVX-512 with byte
#: permutes, masked byte loads and stores)
BYTE_VECTOR_LEVELS = ({"avx2"}, {"avx512f", "avx512bw", "avx512vl", "avx512vbmi"})


def byte_vector_level(info=None):
    """The widest vector instructions on bytes this CPU runs, as the kernels that take a
    ``simd`` argument (the augmentation's resize) count them: 0 none, 1 AVX2, 2 AVX-512 F, BW,
    VL and VBMI (``NEONLITE_CPU_FEATURES_OFF`` lowers it)."""
    flags, level = cpu_flags(info), 0
    for need in BYTE_VECTOR_LEVELS:
        if not need <= flags:
            break
        level += 1
    return level


#: the flags the storage path's GEMM (``kernels/cpu/bf16/gemm_storage.c``) runs on: float32
#: FMA on 512-bit vectors, masked 16-bit loads and stores
AVX512_FLOAT = frozenset({"avx512f", "avx512bw", "avx512vl"})


def has_avx512_float(info=None):
    """True where the AVX-512 float kernels run (:data:`AVX512_FLOAT`)."""
    return AVX512_FLOAT <= cpu_flags(info)


#: the flags the storage path's GEMM runs on where AVX-512 does not: float32 FMA on 256-bit
#: vectors
AVX2_FLOAT = frozenset({"avx2", "fma"})


def has_avx2_float(info=None):
    """True where the AVX2 float kernels run (:data:`AVX2_FLOAT`)."""
    return AVX2_FLOAT <= cpu_flags(info)


def has_avx512_bf16(info=None):
    """True where ``VDPBF16PS`` runs (AVX512-BF16, and AVX-512 itself)."""
    flags = cpu_flags(info)
    return {"avx512f", "avx512_bf16"} <= flags


@functools.lru_cache(maxsize=None)
def _amx_granted():
    """``(granted?, reason)``: ask Linux once for the AMX tile data state of this process."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        bits = ctypes.c_uint64(0)
        if libc.syscall(SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ctypes.byref(bits)) == 0 and \
                bits.value & (1 << XFEATURE_XTILEDATA):
            return True, "granted"
        if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0:
            return False, f"arch_prctl(ARCH_REQ_XCOMP_PERM) refused: " \
                f"{os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as err:
        return False, f"arch_prctl not callable: {err}"
    return True, "granted"


def amx_bf16_state(info=None):
    """``(usable?, reason)`` of AMX-BF16 (``TDPBF16PS``): the CPU flags, then the kernel's
    grant of the tile state (asked only where the flags are there)."""
    flags = cpu_flags(info)
    missing = [f for f in ("amx_tile", "amx_bf16") if f not in flags]
    if missing:
        return False, f"no {' or '.join(missing)} in the CPU flags"
    if info is not None:
        return True, "flags present (grant not asked for another machine's flags)"
    return _amx_granted()


def has_amx_bf16(info=None):
    """True where AMX-BF16 tiles may run in this process (see :func:`amx_bf16_state`)."""
    return amx_bf16_state(info)[0]
