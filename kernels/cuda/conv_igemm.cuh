// Convolution on NHWC as an implicit GEMM: the three passes are each a GEMM
// out[M][Ng] = sum over kd < Kd of A(m, kd) * B(kd, j), where A and B are gathered from the
// tensors on the fly (no patch matrix in memory):
//
//   pass 0 fprop   M = N*P*Q (n,p,q)  Ng = K   Kd = R*S*C (r,s,c)
//                  A = I[n][p*str_h - pad_h + r*dil_h][q*str_w - pad_w + s*dil_w][c] (0 outside)
//                  B = F[r][s][c][j]                           out = O (N, P, Q, K)
//   pass 1 bprop   M = N*H*W (n,h,w)  Ng = C   Kd = R*S*K (r,s,k)
//                  A = E[n][p][q][k] where h = p*str_h - pad_h + r*dil_h (and likewise w) has a
//                      whole p in [0, P) (else 0)
//                  B = F[r][s][j][k]                           out = grad_I (N, H, W, C)
//   pass 2 update  M = R*S*C (r,s,c)  Ng = K   Kd = N*P*Q (n,p,q)
//                  A = the pass-0 patch element (row kd, column m)
//                  B = E[kd][j]                                out = grad_F (R, S, C, K)
//
// Every out is a row-major (M, Ng) matrix, so one epilogue serves all passes:
// out = acc + beta * out (+ bias[j]) (then ReLU), in float32, stored in the storage type.
// Loaders return raw storage elements (float, or float16/bfloat16 bits) so the tensor-core
// kernels can stage 16-bit tiles in shared memory unconverted.
#pragma once
#include "neonlite_common.cuh"

struct nl_conv_shape {
    int N, H, W, C, K, P, Q, R, S, pad_h, pad_w, str_h, str_w, dil_h, dil_w;
};

// GEMM extents of a pass.
__device__ __forceinline__ void nl_conv_gemm_dims(int pass, const nl_conv_shape& d, int* M,
                                                  int* Ng, int* Kd) {
    if (pass == 0) { *M = d.N * d.P * d.Q; *Ng = d.K; *Kd = d.R * d.S * d.C; }
    else if (pass == 1) { *M = d.N * d.H * d.W; *Ng = d.C; *Kd = d.R * d.S * d.K; }
    else { *M = d.R * d.S * d.C; *Ng = d.K; *Kd = d.N * d.P * d.Q; }
}

// Offset of the input element of output (n, p, q) at filter tap (r, s), channel c; -1 in the
// padding.
__device__ __forceinline__ long long nl_conv_patch_at(const nl_conv_shape& d, int n, int p,
                                                      int q, int r, int s, int c) {
    int h = p * d.str_h - d.pad_h + r * d.dil_h, w = q * d.str_w - d.pad_w + s * d.dil_w;
    if (h < 0 || h >= d.H || w < 0 || w >= d.W) return -1;
    return (((long long)n * d.H + h) * d.W + w) * d.C + c;
}

// Offset of A(m, kd) of pass PASS in its source tensor, -1 where A is 0 (m < M and kd < Kd are
// the caller's to check).
template <int PASS>
__device__ __forceinline__ long long nl_conv_a_at(const nl_conv_shape& d, int m, int kd) {
    if (PASS == 0) {
        int q = m % d.Q, np = m / d.Q, p = np % d.P, n = np / d.P;
        int c = kd % d.C, rs = kd / d.C, s = rs % d.S, r = rs / d.S;
        return nl_conv_patch_at(d, n, p, q, r, s, c);
    } else if (PASS == 1) {
        int w = m % d.W, nh = m / d.W, h = nh % d.H, n = nh / d.H;
        int k = kd % d.K, rs = kd / d.K, s = rs % d.S, r = rs / d.S;
        int ph = h + d.pad_h - r * d.dil_h, qw = w + d.pad_w - s * d.dil_w;
        if (ph < 0 || qw < 0 || ph % d.str_h || qw % d.str_w) return -1;
        int p = ph / d.str_h, q = qw / d.str_w;
        if (p >= d.P || q >= d.Q) return -1;
        return (((long long)n * d.P + p) * d.Q + q) * d.K + k;
    } else {
        int c = m % d.C, rs = m / d.C, s = rs % d.S, r = rs / d.S;
        int q = kd % d.Q, np = kd / d.Q, p = np % d.P, n = np / d.P;
        return nl_conv_patch_at(d, n, p, q, r, s, c);
    }
}

// Offset of B(kd, j) of pass PASS in its source tensor.
template <int PASS>
__device__ __forceinline__ long long nl_conv_b_at(const nl_conv_shape& d, int kd, int j) {
    if (PASS == 1) return ((long long)(kd / d.K) * d.C + j) * d.K + kd % d.K;
    return (long long)kd * d.K + j;
}

template <int PASS, int KIND>
__device__ __forceinline__ typename nl_elem<KIND>::T nl_conv_load_a(
        const typename nl_elem<KIND>::T* src, const nl_conv_shape& d, int m, int kd) {
    long long at = nl_conv_a_at<PASS>(d, m, kd);
    return at < 0 ? (typename nl_elem<KIND>::T)0 : src[at];
}

template <int PASS, int KIND>
__device__ __forceinline__ typename nl_elem<KIND>::T nl_conv_load_b(
        const typename nl_elem<KIND>::T* src, const nl_conv_shape& d, int kd, int j) {
    return src[nl_conv_b_at<PASS>(d, kd, j)];
}

// With C and K multiples of 8 (16-bit storage, 16-byte aligned tensors), the 8 elements of A
// or B that follow (m, kd) / (kd, j) along the loader's fast index are contiguous in memory and
// share one filter tap (so one padding test): one 16-byte load.
// Which index runs fastest across consecutive threads when a tile is loaded, so that global
// reads are coalesced: A's kd (channels c or k) in passes 0 and 1, A's m (channels c) in pass 2;
// B's j (K) in passes 0 and 2, B's kd (k) in pass 1.
#define NL_CONV_A_KD_FAST(PASS) ((PASS) != 2)
#define NL_CONV_B_J_FAST(PASS) ((PASS) != 1)

// The epilogue of element (m, j): out = acc + beta * out + bias[j], ReLU when relu != 0.
// With a split-K workspace (splits > 1) the raw partial sum goes to work[split][m][j] instead
// and nl_conv_splitk_reduce applies the epilogue.
template <int KIND>
__device__ __forceinline__ void nl_conv_store(typename nl_elem<KIND>::T* out, float* work,
                                              int split, int M, int Ng, int m, int j, float acc,
                                              float beta, const typename nl_elem<KIND>::T* bias,
                                              int relu) {
    typedef nl_elem<KIND> E;
    if (m >= M || j >= Ng) return;
    long long at = (long long)m * Ng + j;
    if (work) {
        work[(long long)split * M * Ng + at] = acc;
        return;
    }
    if (beta != 0.0f) acc += beta * E::load(out, at);
    if (bias) acc += E::load(bias, j);
    if (relu) acc = acc > 0.0f ? acc : 0.0f;
    E::store(out, at, acc);
}

// The K-range [k0, k1) of split `split` of `splits`, in whole tiles of BK.
__device__ __forceinline__ void nl_conv_split_range(int Kd, int BK, int split, int splits,
                                                    int* k0, int* k1) {
    int tiles = (Kd + BK - 1) / BK;
    int per = (tiles + splits - 1) / splits;
    *k0 = split * per * BK;
    *k1 = min(Kd, (split + 1) * per * BK);
}
