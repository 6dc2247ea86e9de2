"""Run CUDA kernels on the host, to test kernel *logic* where no GPU is present.

The kernel source is compiled as C++20 by g++ with a small shim (``threadIdx``/``blockIdx`` as
thread-locals, ``__shared__`` as function statics, ``__syncthreads`` as a ``std::barrier``,
float16 through ``_Float16``).  A launch starts ``blockDim`` real threads that run the blocks one after
another, so shared memory and barriers behave as on a GPU.  ``NL_HOST_EMULATOR`` is defined, so
a kernel can swap inline PTX for the emulated equivalent.  The one tensor-core instruction
emulated is ``mma.sync.aligned.m16n8k16`` (float16 / bfloat16 in, float32 accumulate) as
``nl_mma_m16n8k16<KIND>(d, a, b)``: each lane posts its fragment registers, then computes its
own four results from the warp's fragments in the layout the PTX ISA documents, so a kernel's
fragment addressing is checked exactly; every thread of the block must reach each call (it
synchronizes the block, a stricter rule than the warp's).  Of the atomics only 64-bit unsigned
``atomicMin`` is emulated; warp shuffles are not.  This checks indexing, broadcasting and
reduction logic, not performance, and it is no substitute for running the same tests on a GPU.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

_SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>
#include <math.h>
struct nl_dim3 { unsigned x, y, z; };
static thread_local nl_dim3 threadIdx, blockIdx;
static nl_dim3 blockDim, gridDim;
static std::barrier<>* nl_barrier;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
using std::isnan;
using std::max;
using std::min;
#define NL_HOST_EMULATOR 1
static inline void __syncthreads() { nl_barrier->arrive_and_wait(); }
static inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    std::atomic_ref<unsigned long long> a(*p);
    unsigned long long old = a.load();
    while (v < old && !a.compare_exchange_weak(old, v)) {}
    return old;
}
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32); }
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
#define __align__(n) __attribute__((aligned(n)))
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w}; }
struct __half { _Float16 v; };
static inline float __half2float(__half h) { return (float)h.v; }
static inline __half __float2half_rn(float f) { __half h; h.v = (_Float16)f; return h; }
static inline __half __ushort_as_half(unsigned short b) { __half h; std::memcpy(&h, &b, 2);
                                                          return h; }
static inline unsigned short __half_as_ushort(__half h) { unsigned short b;
                                                           std::memcpy(&b, &h, 2); return b; }
struct NlArg {
    void* p; float f; long long i;
    template <class T> operator T*() const { return (T*)p; }
    template <class S> requires std::is_class_v<S> operator S() const {
        S s; std::memcpy(&s, p, sizeof(S)); return s; }
    operator float() const { return f; }
    operator int() const { return (int)i; }
    operator unsigned() const { return (unsigned)i; }
    operator long long() const { return i; }
    operator unsigned long long() const { return (unsigned long long)i; }
};
static float nl_emu_16(unsigned reg, int half, int kind) {
    unsigned short bits = (unsigned short)(half ? reg >> 16 : reg & 0xFFFFu);
    if (kind == 2) return __uint_as_float((unsigned)bits << 16);
    _Float16 h; std::memcpy(&h, &bits, 2); return (float)h;
}
struct nl_mma_slot { unsigned a[4], b[2]; };
static nl_mma_slot nl_mma_slots[1024];
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: lane 4*g + t holds A rows g, g+8 at columns
// 2t, 2t+1 (a[0], a[1]) and 2t+8, 2t+9 (a[2], a[3]); B rows (k) 2t, 2t+1 (b[0]) and +8 (b[1])
// of column g; C rows g (c[0], c[1]) and g+8 (c[2], c[3]) at columns 2t, 2t+1.
template <int KIND>
static void nl_mma_m16n8k16(float* d, const unsigned* a, const unsigned* b) {
    unsigned tid = threadIdx.x + threadIdx.y * blockDim.x, base = tid / 32 * 32, lane = tid % 32;
    nl_mma_slot& mine = nl_mma_slots[tid];
    for (int i = 0; i < 4; ++i) mine.a[i] = a[i];
    for (int i = 0; i < 2; ++i) mine.b[i] = b[i];
    __syncthreads();
    int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
        int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) {
            const nl_mma_slot& sa = nl_mma_slots[base + 4 * (row % 8) + (k % 8) / 2];
            const nl_mma_slot& sb = nl_mma_slots[base + 4 * col + (k % 8) / 2];
            float av = nl_emu_16(sa.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2, KIND);
            float bv = nl_emu_16(sb.b[k >= 8 ? 1 : 0], k % 2, KIND);
            sum += av * bv;
        }
        d[e] += sum;
    }
    __syncthreads();
}
// A kernel called with a parameter buffer packed as CUDA (and pycuda's prepared calls) pack it:
// each parameter at the next multiple of its alignment.
template <class T> static T nl_take(const char* buf, size_t& off) {
    off = (off + alignof(T) - 1) / alignof(T) * alignof(T);
    T v;
    std::memcpy(&v, buf + off, sizeof(T));
    off += sizeof(T);
    return v;
}
template <class... A> static void nl_call_packed(void (*f)(A...), const char* buf) {
    size_t off = 0;
    std::tuple<A...> args{nl_take<A>(buf, off)...};
    std::apply(f, args);
}
template <class F>
static void nl_run(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, F body) {
    blockDim = {bx, by, 1};
    gridDim = {gx, gy, gz};
    std::barrier<> bar(bx * by);
    nl_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned ty = 0; ty < by; ++ty)
        for (unsigned tx = 0; tx < bx; ++tx)
            threads.emplace_back([=, &bar] {
                threadIdx = {tx, ty, 0};
                for (unsigned cz = 0; cz < gz; ++cz)
                    for (unsigned cy = 0; cy < gy; ++cy)
                        for (unsigned cx = 0; cx < gx; ++cx) {
                            blockIdx = {cx, cy, cz};
                            body();
                            bar.arrive_and_wait();
                        }
            });
    for (auto& t : threads) t.join();
}
"""


class _Arg(ctypes.Structure):
    _fields_ = [("p", ctypes.c_void_p), ("f", ctypes.c_float), ("i", ctypes.c_longlong)]


def available():
    """None when g++ (C++20) is here, else the reason the emulator cannot run."""
    return None if shutil.which("g++") else "g++ is not installed"


def _strip(source):
    lines = [l for l in source.splitlines()
             if not l.strip().startswith(("#include <cuda", "#pragma once", '#include "'))]
    return "\n".join(lines)


class HostModule:
    """Kernels compiled together for the host.  ``kernels`` maps name -> number of arguments
    (None: launched only with :meth:`launch_packed`);
    ``sources`` are CUDA sources (``#include`` lines of CUDA headers and local files are
    dropped: pass the shared header in ``prelude``).  Every kernel can also be launched with a
    packed parameter buffer (:meth:`launch_packed`), laid out as a CUDA launch lays it out."""

    def __init__(self, sources, kernels, prelude="", workdir=None):
        body = "\n".join(_strip(s) for s in sources)
        launchers = []
        for name, nargs in kernels.items():
            launchers.append(
                f'extern "C" void packed_{name}(unsigned gx, unsigned gy, unsigned gz, '
                f'unsigned bx, unsigned by, const char* p) {{ nl_run(gx, gy, gz, bx, by, [=] '
                f'{{ nl_call_packed({name}, p); }}); }}')
            if nargs is None:
                continue
            call = ", ".join(f"a[{i}]" for i in range(nargs))
            launchers.append(
                f'extern "C" void launch_{name}(unsigned gx, unsigned gy, unsigned gz, '
                f'unsigned bx, unsigned by, const NlArg* a) {{ nl_run(gx, gy, gz, bx, by, '
                f'[=] {{ {name}({call}); }}); }}')
        text = "\n".join([_SHIM, _strip(prelude), body, *launchers])
        digest = hashlib.sha1(text.encode()).hexdigest()[:16]
        workdir = Path(workdir or os.environ.get("NEONLITE_EMULATOR_DIR",
                                                 Path(tempfile.gettempdir()) / "neonlite_emu"))
        workdir.mkdir(parents=True, exist_ok=True)
        lib = workdir / f"emu_{digest}.so"
        if not lib.exists():  # several processes (pytest -n) may build it at once: each
            # compiles its own source and library, and the last rename wins
            src = workdir / f"emu_{digest}.{os.getpid()}.cpp"
            src.write_text(text)
            tmp = workdir / f"emu_{digest}.{os.getpid()}.so"
            try:
                result = subprocess.run(["g++", "-std=c++20", "-O0", "-shared", "-fPIC",
                                         "-pthread", "-w", "-o", str(tmp), str(src)],
                                        capture_output=True, text=True)
            finally:
                src.unlink(missing_ok=True)
            if result.returncode != 0:
                raise RuntimeError(f"host compile of the kernels failed:\n{result.stderr[-4000:]}")
            os.replace(tmp, lib)
        self._lib = ctypes.CDLL(str(lib))

    def launch(self, name, grid, block, args):
        """Run kernel ``name``: ``args`` are numpy arrays (passed as pointers to their first
        element; a struct argument is an array holding its fields, copied in by value), Python
        floats (float) and ints (int / long long)."""
        packed = (_Arg * max(1, len(args)))()
        for slot, value in zip(packed, args):
            if isinstance(value, np.ndarray):
                slot.p = value.ctypes.data
            elif isinstance(value, (float, np.floating)):
                slot.f = float(value)
            else:
                slot.i = int(value)
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        getattr(self._lib, f"launch_{name}")(ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]),
                                             ctypes.c_uint(grid[2]), ctypes.c_uint(block[0]),
                                             ctypes.c_uint(block[1]), packed)

    def launch_packed(self, name, grid, block, params):
        """Run kernel ``name`` with ``params``: bytes packed as CUDA packs a launch's parameters
        (pycuda's prepared calls: ``struct.pack`` of the argument format, native alignment)."""
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        buf = ctypes.create_string_buffer(bytes(params) or b"\0")
        getattr(self._lib, f"packed_{name}")(*(ctypes.c_uint(v) for v in grid),
                                             ctypes.c_uint(block[0]), ctypes.c_uint(block[1]),
                                             buf)
