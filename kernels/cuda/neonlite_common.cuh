// Device helpers shared by neonlite's CUDA kernels and by the op-tree kernels that
// backends/cuda_codegen.py generates (which inline this file, so it must stay self-contained:
// no #include of anything but CUDA's own headers).
//
// Storage types: float32, float16 (__half bits as unsigned short), bfloat16 (raw bits as
// unsigned short).  Arithmetic is always float32.
#pragma once
#include <cuda_fp16.h>

typedef unsigned short nl_u16;

// bfloat16 bits -> float32 (exact).
__device__ __forceinline__ float nl_bf16_to_f32(unsigned int bits) {
    return __uint_as_float((bits & 0xFFFFu) << 16);
}

// float32 -> bfloat16 bits, round to nearest even; any NaN becomes the quiet NaN 0x7FC0.
__device__ __forceinline__ unsigned int nl_f32_to_bf16(float x) {
    if (isnan(x)) return 0x7FC0u;
    unsigned int bits = __float_as_uint(x);
    return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ float nl_f16_to_f32(nl_u16 bits) {
    return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ nl_u16 nl_f32_to_f16(float x) {
    return __half_as_ushort(__float2half_rn(x));
}

// numpy's maximum/minimum: a NaN in either argument gives NaN.
__device__ __forceinline__ float nl_max(float a, float b) {
    return (a > b || isnan(a)) ? a : b;
}

__device__ __forceinline__ float nl_min(float a, float b) {
    return (a < b || isnan(a)) ? a : b;
}

// numpy's sign: -1, 0 or 1, NaN stays NaN.
__device__ __forceinline__ float nl_sign(float a) {
    return isnan(a) ? a : (float)((a > 0.0f) - (a < 0.0f));
}

// The logistic function, in the form the CPU backend uses (no overflow for large |x|).
__device__ __forceinline__ float nl_sig(float a) {
    return 0.5f * (tanhf(0.5f * a) + 1.0f);
}

// Is (v, i) a better argmax (is_max) / argmin candidate than (bv, bi)?  numpy's rules: the
// first NaN wins, then the extreme value, ties going to the smaller index.
__device__ __forceinline__ bool nl_arg_better(float v, long long i, float bv, long long bi,
                                              bool is_max) {
    bool vn = isnan(v), bn = isnan(bv);
    if (vn || bn) return vn && (!bn || i < bi);
    if (v == bv) return i < bi;
    return is_max ? v > bv : v < bv;
}

// Typed element access for the hand-written kernels: NL_T is float (f32) or nl_u16 holding
// float16 (KIND 1) or bfloat16 (KIND 2) bits.
template <int KIND> struct nl_elem;
template <> struct nl_elem<0> {
    typedef float T;
    static __device__ __forceinline__ float load(const float* p, long long i) { return p[i]; }
    static __device__ __forceinline__ void store(float* p, long long i, float v) { p[i] = v; }
};
template <> struct nl_elem<1> {
    typedef nl_u16 T;
    static __device__ __forceinline__ float load(const nl_u16* p, long long i) {
        return nl_f16_to_f32(p[i]); }
    static __device__ __forceinline__ void store(nl_u16* p, long long i, float v) {
        p[i] = nl_f32_to_f16(v); }
};
template <> struct nl_elem<2> {
    typedef nl_u16 T;
    static __device__ __forceinline__ float load(const nl_u16* p, long long i) {
        return nl_bf16_to_f32(p[i]); }
    static __device__ __forceinline__ void store(nl_u16* p, long long i, float v) {
        p[i] = (nl_u16)nl_f32_to_bf16(v); }
};

// Grid-stride loop over [0, n).
#define NL_FOR(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; \
                          i < (n); i += (long long)blockDim.x * gridDim.x)

// Instantiate extern "C" entry points <prefix>_f32/_f16/_bf16 of template kernel body
// <prefix>_impl<KIND>; PARAMS(T) is the parameter list with element type T, ARGS the names.
#define NL_THREE_TYPES(prefix, PARAMS, ARGS)                                              \
    extern "C" __global__ void prefix##_f32(PARAMS(float)) { prefix##_impl<0> ARGS; }     \
    extern "C" __global__ void prefix##_f16(PARAMS(nl_u16)) { prefix##_impl<1> ARGS; }    \
    extern "C" __global__ void prefix##_bf16(PARAMS(nl_u16)) { prefix##_impl<2> ARGS; }

// Tensor cores: d += A * B for one mma.sync m16n8k16 tile with float32 accumulation
// (KIND 1: float16, 2: bfloat16 inputs; fragments as the PTX ISA lays them out).  The host
// emulator defines its own from that layout.
#ifndef NL_HOST_EMULATOR
template <int KIND>
__device__ __forceinline__ void nl_mma_m16n8k16(float* d, const unsigned* a, const unsigned* b);

// One specialisation per input type; they differ only in the PTX type name.
#define NL_MMA_M16N8K16(KIND, PTX_TYPE)                                                       \
    template <>                                                                               \
    __device__ __forceinline__ void nl_mma_m16n8k16<KIND>(float* d, const unsigned* a,       \
                                                          const unsigned* b) {                \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE           \
                     ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"          \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                         \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));     \
    }
NL_MMA_M16N8K16(1, "f16")
NL_MMA_M16N8K16(2, "bf16")
#undef NL_MMA_M16N8K16
#endif
