// Implicit-GEMM convolution, float32 path (CUDA cores): see conv_igemm.cuh for the three
// passes as GEMMs.  A block of 256 threads computes a BM x BN tile of out; each thread a
// TM x TN sub-tile.  Each K step stages A (BM x BK) and B (BK x BN) in shared memory as float32,
// gathered from the NHWC tensors (padding, stride and dilation in the gather).  Grid:
// (ceil(Ng / BN), ceil(M / BM), splits); with splits > 1 each z slice sums its own K range into
// the float32 workspace and nl_conv_splitk_reduce_* finishes (a fixed order: deterministic).
//
// Entry points nl_conv_<pass>_simt<BM>x<BN>_f32, pass in fprop / bprop / update, with
// arguments (out, a_src, b_src, bias or 0, work or 0, nl_conv_shape, splits, beta, relu); the
// _v4 versions load 4 floats at a time (C and K multiples of 4, tensors 16-byte aligned) and
// keep the next K step in registers while the current one is multiplied.
#include "conv_igemm.cuh"

#define NL_SIMT_THREADS 256

// Element-wise staging of K step k0 as float32 into As[BK][BM] / Bs[BK][BN] (any C and K).
template <int PASS, int KIND, int BM, int BN, int BK>
__device__ __forceinline__ void nl_conv_simt_stage1(float (*As)[BM + 4], float (*Bs)[BN + 4],
                                                    const typename nl_elem<KIND>::T* a_src,
                                                    const typename nl_elem<KIND>::T* b_src,
                                                    const nl_conv_shape& d, int M, int Ng,
                                                    int m0, int j0, int k0, int k_end) {
    typedef typename nl_elem<KIND>::T T;
    for (int e = threadIdx.x; e < BM * BK; e += NL_SIMT_THREADS) {
        int mm, kk;
        if (NL_CONV_A_KD_FAST(PASS)) { kk = e % BK; mm = e / BK; }
        else { mm = e % BM; kk = e / BM; }
        int m = m0 + mm, kd = k0 + kk;
        float v = 0.0f;
        if (m < M && kd < k_end) {
            T raw = nl_conv_load_a<PASS, KIND>(a_src, d, m, kd);
            v = nl_elem<KIND>::load(&raw, 0);
        }
        As[kk][mm] = v;
    }
    for (int e = threadIdx.x; e < BK * BN; e += NL_SIMT_THREADS) {
        int jj, kk;
        if (NL_CONV_B_J_FAST(PASS)) { jj = e % BN; kk = e / BN; }
        else { kk = e % BK; jj = e / BK; }
        int j = j0 + jj, kd = k0 + kk;
        float v = 0.0f;
        if (j < Ng && kd < k_end) {
            T raw = nl_conv_load_b<PASS, KIND>(b_src, d, kd, j);
            v = nl_elem<KIND>::load(&raw, 0);
        }
        Bs[kk][jj] = v;
    }
}

// The 4-wide float32 path (C and K multiples of 4, 16-byte aligned tensors): each thread holds
// its groups of 4 consecutive elements (along the coalesced index) of one K step in registers,
// so the next step's float4 loads are issued before the current step's arithmetic; their
// addresses come from nl_conv_gather (row parts once, tap parts stepped).
template <int BM, int BN, int BK>
struct nl_simt_regs {
    static constexpr int NA = (BM * BK / 4 + NL_SIMT_THREADS - 1) / NL_SIMT_THREADS;
    static constexpr int NB = (BN * BK / 4 + NL_SIMT_THREADS - 1) / NL_SIMT_THREADS;
    float4 a[NA], b[NB];
};

template <int PASS, int BM, int BN, int BK>
using nl_simt_gather = nl_conv_gather<PASS, BM, BN, BK, 4, NL_SIMT_THREADS>;

template <int PASS, int BM, int BN, int BK>
__device__ __forceinline__ void nl_conv_simt_load4(nl_simt_regs<BM, BN, BK>& r,
                                                   const nl_simt_gather<PASS, BM, BN, BK>& gather,
                                                   const float* a_src, const float* b_src,
                                                   const nl_conv_shape& d, int Ng, int j0, int k0,
                                                   int k_end) {
    typedef nl_simt_regs<BM, BN, BK> R;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    #pragma unroll
    for (int i = 0; i < R::NA; ++i) {
        long long at = gather.a_at(d, i, k_end);
        r.a[i] = at >= 0 ? *(const float4*)(a_src + at) : zero;
    }
    #pragma unroll
    for (int i = 0; i < R::NB; ++i) {
        long long at = gather.b_at(d, i, Ng, j0, k0, k_end);
        r.b[i] = at >= 0 ? *(const float4*)(b_src + at) : zero;
    }
}

template <int PASS, int BM, int BN, int BK>
__device__ __forceinline__ void nl_conv_simt_store4(const nl_simt_regs<BM, BN, BK>& r,
                                                    float (*As)[BM + 4], float (*Bs)[BN + 4]) {
    typedef nl_simt_regs<BM, BN, BK> R;
    #pragma unroll
    for (int i = 0; i < R::NA; ++i) {
        int e = threadIdx.x + i * NL_SIMT_THREADS, mm, kk;
        if (e >= BM * BK / 4) continue;
        nl_conv_a_slot<PASS, BM, BK, 4>(e, &mm, &kk);
        const float* v = (const float*)&r.a[i];
        if (NL_CONV_A_KD_FAST(PASS)) {
            for (int q = 0; q < 4; ++q) As[kk + q][mm] = v[q];
        } else {
            *(float4*)&As[kk][mm] = r.a[i];
        }
    }
    #pragma unroll
    for (int i = 0; i < R::NB; ++i) {
        int e = threadIdx.x + i * NL_SIMT_THREADS, jj, kb;
        if (e >= BN * BK / 4) continue;
        nl_conv_b_slot<PASS, BN, BK, 4>(e, &jj, &kb);
        const float* v = (const float*)&r.b[i];
        if (NL_CONV_B_J_FAST(PASS)) {
            *(float4*)&Bs[kb][jj] = r.b[i];
        } else {
            for (int q = 0; q < 4; ++q) Bs[kb + q][jj] = v[q];
        }
    }
}

// acc += the thread's TM x TN share of As^T x Bs over one K step.
template <int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void nl_conv_simt_fma(float (&acc)[TM][TN], const float (*As)[BM + 4],
                                                 const float (*Bs)[BN + 4], int tx, int ty) {
    #pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
        float a[TM], b[TN];
        #pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
        #pragma unroll
        for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx * TN + j];
        #pragma unroll
        for (int i = 0; i < TM; ++i)
            #pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
}

template <int PASS, int KIND, int BM, int BN, int BK, int TM, int TN, bool VEC>
__device__ void nl_conv_simt(typename nl_elem<KIND>::T* out,
                             const typename nl_elem<KIND>::T* a_src,
                             const typename nl_elem<KIND>::T* b_src,
                             const typename nl_elem<KIND>::T* bias, float* work,
                             nl_conv_shape d, int splits, float beta, int relu) {
    static_assert((BM / TM) * (BN / TN) == NL_SIMT_THREADS, "tile does not fit 256 threads");
    static_assert(!VEC || KIND == 0, "the 4-wide path is float32");
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN + 4];
    int M, Ng, Kd;
    nl_conv_gemm_dims(PASS, d, &M, &Ng, &Kd);
    const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN, split = blockIdx.z;
    int k_begin, k_end;
    nl_conv_split_range(Kd, BK, split, splits, &k_begin, &k_end);
    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    if constexpr (VEC) {
        const float* a = (const float*)a_src;
        const float* b = (const float*)b_src;
        nl_simt_regs<BM, BN, BK> regs;
        nl_simt_gather<PASS, BM, BN, BK> gather;
        gather.init(d, M, m0, k_begin);
        if (k_begin < k_end)
            nl_conv_simt_load4<PASS, BM, BN, BK>(regs, gather, a, b, d, Ng, j0, k_begin, k_end);
        for (int k0 = k_begin; k0 < k_end; k0 += BK) {
            nl_conv_simt_store4<PASS, BM, BN, BK>(regs, As, Bs);
            __syncthreads();
            if (k0 + BK < k_end) {
                gather.advance(d);
                nl_conv_simt_load4<PASS, BM, BN, BK>(regs, gather, a, b, d, Ng, j0, k0 + BK,
                                                     k_end);
            }
            nl_conv_simt_fma<BM, BN, BK, TM, TN>(acc, As, Bs, tx, ty);
            __syncthreads();
        }
    } else {
        for (int k0 = k_begin; k0 < k_end; k0 += BK) {
            nl_conv_simt_stage1<PASS, KIND, BM, BN, BK>(As, Bs, a_src, b_src, d, M, Ng, m0, j0,
                                                        k0, k_end);
            __syncthreads();
            nl_conv_simt_fma<BM, BN, BK, TM, TN>(acc, As, Bs, tx, ty);
            __syncthreads();
        }
    }
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j)
            nl_conv_store<KIND>(out, splits > 1 ? work : (float*)0, split, M, Ng,
                                m0 + ty * TM + i, j0 + tx * TN + j, acc[i][j], beta, bias,
                                relu);
}

// out[m][j] = epilogue(sum over s < splits of work[s][m][j]) (see nl_conv_store).
template <int KIND>
__device__ void nl_conv_splitk_reduce_impl(typename nl_elem<KIND>::T* out, const float* work,
                                           const typename nl_elem<KIND>::T* bias, int M, int Ng,
                                           int splits, float beta, int relu) {
    NL_FOR(i, (long long)M * Ng) {
        float acc = 0.0f;
        for (int s = 0; s < splits; ++s) acc += work[(long long)s * M * Ng + i];
        nl_conv_store<KIND>(out, (float*)0, 0, M, Ng, (int)(i / Ng), (int)(i % Ng), acc, beta,
                            bias, relu);
    }
}

#define NL_CONV_SIMT_ENTRY(pass_name, PASS, BM, BN, TM, TN, VEC, suffix)                      \
    extern "C" __global__ void __launch_bounds__(NL_SIMT_THREADS)                               \
    nl_conv_##pass_name##_simt##BM##x##BN##_f32##suffix(                                        \
            float* out, const float* a_src, const float* b_src, const float* bias, float* work, \
            nl_conv_shape d, int splits, float beta, int relu) {                                \
        nl_conv_simt<PASS, 0, BM, BN, 16, TM, TN, VEC>(out, a_src, b_src, bias, work, d,        \
                                                       splits, beta, relu);                     \
    }

#define NL_CONV_SIMT_BOTH(pass_name, PASS, BM, BN, TM, TN)          \
    NL_CONV_SIMT_ENTRY(pass_name, PASS, BM, BN, TM, TN, false, )    \
    NL_CONV_SIMT_ENTRY(pass_name, PASS, BM, BN, TM, TN, true, _v4)

#define NL_CONV_SIMT_TILES(pass_name, PASS)          \
    NL_CONV_SIMT_BOTH(pass_name, PASS, 32, 32, 2, 2) \
    NL_CONV_SIMT_BOTH(pass_name, PASS, 64, 64, 4, 4) \
    NL_CONV_SIMT_BOTH(pass_name, PASS, 128, 64, 8, 4)

NL_CONV_SIMT_TILES(fprop, 0)
NL_CONV_SIMT_TILES(bprop, 1)
NL_CONV_SIMT_TILES(update, 2)

#define SPLITK_PARAMS(T) T* out, const float* work, const T* bias, int M, int Ng, int splits, \
    float beta, int relu
NL_THREE_TYPES(nl_conv_splitk_reduce, SPLITK_PARAMS, (out, work, bias, M, Ng, splits, beta, relu))
