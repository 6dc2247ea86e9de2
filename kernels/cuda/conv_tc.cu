// Implicit-GEMM convolution on tensor cores: float16 / bfloat16 storage, float32 accumulation,
// mma.sync.aligned.m16n8k16 (sm_80 and later).  See conv_igemm.cuh for the passes as GEMMs.
//
// A block of 4 warps (2 x 2) computes a BM x BN tile of out; a warp a (BM/2) x (BN/2) tile of
// (BM/32) x (BN/16) mma tiles of 16 x 8.  Each K step of 32 stages A as As[BM][32] (row m, k
// contiguous) and B as Bs[BN][32] (column j, k contiguous), both as raw 16-bit elements gathered
// from the NHWC tensors; rows are padded by 8 elements against bank conflicts.  The 8-wide
// entry points keep the next K step's tile in registers, loaded while the current step's
// mma.sync instructions run.  Fragments are
// read from shared memory in the layout the PTX ISA gives for m16n8k16 (lane = 4*group + t):
//   A (16 x 16, row-major): a[0] = rows g, cols 2t..2t+1; a[1] = rows g+8; a[2] = cols +8;
//                           a[3] = rows g+8, cols +8 (two 16-bit elements per register, the
//                           lower column in the low half)
//   B (16 x 8, "col"):      b[0] = rows (k) 2t..2t+1 of column g; b[1] = rows +8
//   C (16 x 8, float32):    c[0], c[1] = row g, cols 2t, 2t+1; c[2], c[3] = row g+8
// The host emulator (tests/cuda_host_emulator.py) runs the same code with nl_mma_* emulated
// from this layout.  Grid: (ceil(Ng / BN), ceil(M / BM), splits), as the float32 path.
//
// Entry points nl_conv_<pass>_tc<BM>x<BN>_<f16|bf16>, arguments as the float32 path's; the
// _v8 versions load 8 elements at a time (C and K multiples of 8, tensors 16-byte aligned).
#include "conv_igemm.cuh"

#define NL_TC_THREADS 128
#define NL_TC_BK 32
#define NL_TC_LD (NL_TC_BK + 8)

// Two consecutive 16-bit elements of a shared-memory row (col even) as one register, the
// lower column in the low half: one 32-bit load.
__device__ __forceinline__ unsigned nl_pair(const nl_u16* row, int col) {
    return *(const unsigned*)(row + col);
}

// Element-wise staging of K step k0 into As[BM][BK] / Bs[BN][BK] (any C and K).
template <int PASS, int BM, int BN>
__device__ __forceinline__ void nl_conv_tc_stage1(nl_u16 (*As)[NL_TC_LD], nl_u16 (*Bs)[NL_TC_LD],
                                                  const nl_u16* a_src, const nl_u16* b_src,
                                                  const nl_conv_shape& d, int M, int Ng, int m0,
                                                  int j0, int k0, int k_end) {
    for (int e = threadIdx.x; e < BM * NL_TC_BK; e += NL_TC_THREADS) {
        int mm, kk;
        nl_conv_a_slot<PASS, BM, NL_TC_BK, 1>(e, &mm, &kk);
        int m = m0 + mm, kd = k0 + kk;
        long long at = (m < M && kd < k_end) ? nl_conv_a_at<PASS>(d, m, kd) : -1;
        As[mm][kk] = at < 0 ? (nl_u16)0 : a_src[at];
    }
    for (int e = threadIdx.x; e < BN * NL_TC_BK; e += NL_TC_THREADS) {
        int jj, kk;
        nl_conv_b_slot<PASS, BN, NL_TC_BK, 1>(e, &jj, &kk);
        int j = j0 + jj, kd = k0 + kk;
        Bs[jj][kk] = (j < Ng && kd < k_end) ? b_src[nl_conv_b_at<PASS>(d, kd, j)] : (nl_u16)0;
    }
}

// The 8-wide path (C and K multiples of 8, 16-byte aligned tensors): each thread holds its
// BM/32 + BN/32 groups of 8 elements of one K step in registers, so the next step's global
// loads are issued before the current step's mma and run behind them.
template <int PASS, int BM, int BN>
using nl_tc_gather = nl_conv_gather<PASS, BM, BN, NL_TC_BK, 8, NL_TC_THREADS>;

template <int BM, int BN>
struct nl_tc_regs {
    uint4 a[BM / 32], b[BN / 32];
};

template <int PASS, int BM, int BN>
__device__ __forceinline__ void nl_conv_tc_load8(nl_tc_regs<BM, BN>& r,
                                                 const nl_tc_gather<PASS, BM, BN>& gather,
                                                 const nl_u16* a_src, const nl_u16* b_src,
                                                 const nl_conv_shape& d, int Ng, int j0, int k0,
                                                 int k_end) {
    #pragma unroll
    for (int i = 0; i < BM / 32; ++i) {
        long long at = gather.a_at(d, i, k_end);
        r.a[i] = at >= 0 ? *(const uint4*)(a_src + at) : make_uint4(0u, 0u, 0u, 0u);
    }
    #pragma unroll
    for (int i = 0; i < BN / 32; ++i) {
        long long at = gather.b_at(d, i, Ng, j0, k0, k_end);
        r.b[i] = at >= 0 ? *(const uint4*)(b_src + at) : make_uint4(0u, 0u, 0u, 0u);
    }
}

template <int PASS, int BM, int BN>
__device__ __forceinline__ void nl_conv_tc_store8(const nl_tc_regs<BM, BN>& r,
                                                  nl_u16 (*As)[NL_TC_LD],
                                                  nl_u16 (*Bs)[NL_TC_LD]) {
    #pragma unroll
    for (int i = 0; i < BM / 32; ++i) {
        int mm, kk;
        nl_conv_a_slot<PASS, BM, NL_TC_BK, 8>(threadIdx.x + i * NL_TC_THREADS, &mm, &kk);
        if (NL_CONV_A_KD_FAST(PASS)) {
            *(uint4*)&As[mm][kk] = r.a[i];
        } else {
            const nl_u16* h = (const nl_u16*)&r.a[i];
            for (int v = 0; v < 8; ++v) As[mm + v][kk] = h[v];
        }
    }
    #pragma unroll
    for (int i = 0; i < BN / 32; ++i) {
        int jj, kk;
        nl_conv_b_slot<PASS, BN, NL_TC_BK, 8>(threadIdx.x + i * NL_TC_THREADS, &jj, &kk);
        if (NL_CONV_B_J_FAST(PASS)) {
            const nl_u16* h = (const nl_u16*)&r.b[i];
            for (int v = 0; v < 8; ++v) Bs[jj + v][kk] = h[v];
        } else {
            *(uint4*)&Bs[jj][kk] = r.b[i];
        }
    }
}

// acc += the warp's (BM/2) x (BN/2) share of As x Bs^T over one K step.
template <int KIND, int MT, int NT>
__device__ __forceinline__ void nl_conv_tc_mma(float (&acc)[MT][NT][4],
                                               const nl_u16 (*As)[NL_TC_LD],
                                               const nl_u16 (*Bs)[NL_TC_LD], int wm, int wn,
                                               int g, int t) {
    #pragma unroll
    for (int ks = 0; ks < NL_TC_BK; ks += 16) {
        unsigned a[MT][4], b[NT][2];
        #pragma unroll
        for (int i = 0; i < MT; ++i) {
            const nl_u16* top = As[wm + i * 16 + g];
            const nl_u16* bottom = As[wm + i * 16 + g + 8];
            a[i][0] = nl_pair(top, ks + 2 * t);
            a[i][1] = nl_pair(bottom, ks + 2 * t);
            a[i][2] = nl_pair(top, ks + 2 * t + 8);
            a[i][3] = nl_pair(bottom, ks + 2 * t + 8);
        }
        #pragma unroll
        for (int j = 0; j < NT; ++j) {
            const nl_u16* col = Bs[wn + j * 8 + g];
            b[j][0] = nl_pair(col, ks + 2 * t);
            b[j][1] = nl_pair(col, ks + 2 * t + 8);
        }
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int j = 0; j < NT; ++j) nl_mma_m16n8k16<KIND>(acc[i][j], a[i], b[j]);
    }
}

template <int PASS, int KIND, int BM, int BN, bool VEC>
__device__ void nl_conv_tc(nl_u16* out, const nl_u16* a_src, const nl_u16* b_src,
                           const nl_u16* bias, float* work, nl_conv_shape d, int splits,
                           float beta, int relu) {
    constexpr int WM = BM / 2, WN = BN / 2, MT = WM / 16, NT = WN / 8;
    __shared__ __align__(16) nl_u16 As[BM][NL_TC_LD];
    __shared__ __align__(16) nl_u16 Bs[BN][NL_TC_LD];
    int M, Ng, Kd;
    nl_conv_gemm_dims(PASS, d, &M, &Ng, &Kd);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp / 2) * WM, wn = (warp % 2) * WN;
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN, split = blockIdx.z;
    int k_begin, k_end;
    nl_conv_split_range(Kd, NL_TC_BK, split, splits, &k_begin, &k_end);
    float acc[MT][NT][4];
    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int j = 0; j < NT; ++j)
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    if constexpr (VEC) {
        nl_tc_regs<BM, BN> regs;
        nl_tc_gather<PASS, BM, BN> gather;
        gather.init(d, M, m0, k_begin);
        if (k_begin < k_end)
            nl_conv_tc_load8<PASS, BM, BN>(regs, gather, a_src, b_src, d, Ng, j0, k_begin, k_end);
        for (int k0 = k_begin; k0 < k_end; k0 += NL_TC_BK) {
            nl_conv_tc_store8<PASS, BM, BN>(regs, As, Bs);
            __syncthreads();
            if (k0 + NL_TC_BK < k_end) {
                gather.advance(d);
                nl_conv_tc_load8<PASS, BM, BN>(regs, gather, a_src, b_src, d, Ng, j0,
                                               k0 + NL_TC_BK, k_end);
            }
            nl_conv_tc_mma<KIND, MT, NT>(acc, As, Bs, wm, wn, g, t);
            __syncthreads();
        }
    } else {
        for (int k0 = k_begin; k0 < k_end; k0 += NL_TC_BK) {
            nl_conv_tc_stage1<PASS, BM, BN>(As, Bs, a_src, b_src, d, M, Ng, m0, j0, k0, k_end);
            __syncthreads();
            nl_conv_tc_mma<KIND, MT, NT>(acc, As, Bs, wm, wn, g, t);
            __syncthreads();
        }
    }
    float* split_work = splits > 1 ? work : (float*)0;
    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int j = 0; j < NT; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                int m = m0 + wm + i * 16 + g + (e >= 2 ? 8 : 0);
                int col = j0 + wn + j * 8 + 2 * t + (e & 1);
                nl_conv_store<KIND>(out, split_work, split, M, Ng, m, col, acc[i][j][e], beta,
                                    bias, relu);
            }
}

#define NL_CONV_TC_ENTRY(pass_name, PASS, BM, BN, kind_name, KIND, VEC, suffix)               \
    extern "C" __global__ void __launch_bounds__(NL_TC_THREADS)                                 \
    nl_conv_##pass_name##_tc##BM##x##BN##_##kind_name##suffix(                                  \
            nl_u16* out, const nl_u16* a_src, const nl_u16* b_src, const nl_u16* bias,          \
            float* work, nl_conv_shape d, int splits, float beta, int relu) {                   \
        nl_conv_tc<PASS, KIND, BM, BN, VEC>(out, a_src, b_src, bias, work, d, splits, beta,    \
                                            relu);                                              \
    }

#define NL_CONV_TC_KINDS(pass_name, PASS, BM, BN)                        \
    NL_CONV_TC_ENTRY(pass_name, PASS, BM, BN, f16, 1, false, )           \
    NL_CONV_TC_ENTRY(pass_name, PASS, BM, BN, bf16, 2, false, )          \
    NL_CONV_TC_ENTRY(pass_name, PASS, BM, BN, f16, 1, true, _v8)         \
    NL_CONV_TC_ENTRY(pass_name, PASS, BM, BN, bf16, 2, true, _v8)

#define NL_CONV_TC_TILES(pass_name, PASS)       \
    NL_CONV_TC_KINDS(pass_name, PASS, 64, 64)   \
    NL_CONV_TC_KINDS(pass_name, PASS, 128, 128)

NL_CONV_TC_TILES(fprop, 0)
NL_CONV_TC_TILES(bprop, 1)
NL_CONV_TC_TILES(update, 2)
