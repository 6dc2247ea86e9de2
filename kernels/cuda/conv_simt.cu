// Implicit-GEMM convolution, float32 path (CUDA cores): see conv_igemm.cuh for the three
// passes as GEMMs.  A block of 256 threads computes a BM x BN tile of out; each thread a
// TM x TN sub-tile.  Each K step stages A (BM x BK) and B (BK x BN) in shared memory as float32,
// gathered from the NHWC tensors (padding, stride and dilation in the gather).  Grid:
// (ceil(Ng / BN), ceil(M / BM), splits); with splits > 1 each z slice sums its own K range into
// the float32 workspace and nl_conv_splitk_reduce_* finishes (a fixed order: deterministic).
//
// Entry points nl_conv_<pass>_simt<BM>x<BN>_f32, pass in fprop / bprop / update, with
// arguments (out, a_src, b_src, bias or 0, work or 0, nl_conv_shape, splits, beta, relu).
#include "conv_igemm.cuh"

#define NL_SIMT_THREADS 256

template <int PASS, int KIND, int BM, int BN, int BK, int TM, int TN>
__device__ void nl_conv_simt(typename nl_elem<KIND>::T* out,
                             const typename nl_elem<KIND>::T* a_src,
                             const typename nl_elem<KIND>::T* b_src,
                             const typename nl_elem<KIND>::T* bias, float* work,
                             nl_conv_shape d, int splits, float beta, int relu) {
    static_assert((BM / TM) * (BN / TN) == NL_SIMT_THREADS, "tile does not fit 256 threads");
    typedef typename nl_elem<KIND>::T T;
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
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
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        for (int e = tid; e < BM * BK; e += NL_SIMT_THREADS) {
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
        for (int e = tid; e < BK * BN; e += NL_SIMT_THREADS) {
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
        __syncthreads();
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
        __syncthreads();
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

#define NL_CONV_SIMT_ENTRY(pass_name, PASS, BM, BN, TM, TN)                                     \
    extern "C" __global__ void __launch_bounds__(NL_SIMT_THREADS)                               \
    nl_conv_##pass_name##_simt##BM##x##BN##_f32(float* out, const float* a_src,                 \
                                                 const float* b_src, const float* bias,         \
                                                 float* work, nl_conv_shape d, int splits,      \
                                                 float beta, int relu) {                        \
        nl_conv_simt<PASS, 0, BM, BN, 16, TM, TN>(out, a_src, b_src, bias, work, d, splits,    \
                                                  beta, relu);                                  \
    }

#define NL_CONV_SIMT_TILES(pass_name, PASS)          \
    NL_CONV_SIMT_ENTRY(pass_name, PASS, 32, 32, 2, 2) \
    NL_CONV_SIMT_ENTRY(pass_name, PASS, 64, 64, 4, 4) \
    NL_CONV_SIMT_ENTRY(pass_name, PASS, 128, 64, 8, 4)

NL_CONV_SIMT_TILES(fprop, 0)
NL_CONV_SIMT_TILES(bprop, 1)
NL_CONV_SIMT_TILES(update, 2)

#define SPLITK_PARAMS(T) T* out, const float* work, const T* bias, int M, int Ng, int splits, \
    float beta, int relu
NL_THREE_TYPES(nl_conv_splitk_reduce, SPLITK_PARAMS, (out, work, bias, M, Ng, splits, beta, relu))
