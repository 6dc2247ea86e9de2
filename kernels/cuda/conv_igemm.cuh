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

// The tile position of slot e (the e-th group of W elements) of the A tile (row mm, column kk
// of BM x BK) and of the B tile (row jj, column kk of BN x BK), along the coalesced index.
template <int PASS, int BM, int BK, int W>
__device__ __forceinline__ void nl_conv_a_slot(int e, int* mm, int* kk) {
    if (NL_CONV_A_KD_FAST(PASS)) { *kk = e % (BK / W) * W; *mm = e / (BK / W); }
    else { *mm = e % (BM / W) * W; *kk = e / (BM / W); }
}

template <int PASS, int BN, int BK, int W>
__device__ __forceinline__ void nl_conv_b_slot(int e, int* jj, int* kk) {
    if (NL_CONV_B_J_FAST(PASS)) { *jj = e % (BN / W) * W; *kk = e / (BN / W); }
    else { *kk = e % (BK / W) * W; *jj = e / (BK / W); }
}

// x / s when s divides x (s = 1, the common stride, without a division).
__device__ __forceinline__ bool nl_div_exact(int x, int s, int* q) {
    if (s == 1) { *q = x; return true; }
    *q = x / s;
    return *q * s == x;
}

// The W-wide gather of one thread of a THREADS-thread block for BM x BK (A) and BK x BN (B)
// tiles: group i of the thread is slot e = threadIdx.x + i * THREADS of nl_conv_a_slot /
// nl_conv_b_slot.  The parts of its addresses that depend only on the output row m are computed
// once; the parts that depend on kd are stepped from one K step to the next without divisions
// (the slots put all of a thread's A groups on one kd in passes 0 and 1, and on one m in
// pass 2, and pass 1's B groups on A's kd).
//   pass 0: row[i] = (n, p*str_h - pad_h, q*str_w - pad_w); k = (c, s, r) of kd
//   pass 1: row[i] = (n, h + pad_h, w + pad_w);              k = (k, s, r) of kd
//   pass 2: row[0] = (c, r*dil_h - pad_h, s*dil_w - pad_w);  step[i] = (q, p, n, kd) per group
template <int PASS, int BM, int BN, int BK, int W, int THREADS>
struct nl_conv_gather {
    static constexpr int GA = BM * BK / W, GB = BN * BK / W;
    static constexpr int NA = (GA + THREADS - 1) / THREADS, NB = (GB + THREADS - 1) / THREADS;
    int row[PASS == 2 ? 1 : NA][3];
    int step[PASS == 2 ? NA : 1][4];
    int kd;

    __device__ __forceinline__ void init(const nl_conv_shape& d, int M, int m0, int k_begin) {
        #pragma unroll
        for (int i = 0; i < (PASS == 2 ? 1 : NA); ++i) {
            int mm, kk;
            nl_conv_a_slot<PASS, BM, BK, W>(threadIdx.x + i * THREADS, &mm, &kk);
            int m = m0 + mm;
            if (m >= M || (int)threadIdx.x + i * THREADS >= GA) { row[i][0] = -1; continue; }
            if (PASS == 0) {
                int q = m % d.Q, t = m / d.Q;
                row[i][0] = t / d.P;
                row[i][1] = t % d.P * d.str_h - d.pad_h;
                row[i][2] = q * d.str_w - d.pad_w;
            } else if (PASS == 1) {
                int w = m % d.W, t = m / d.W;
                row[i][0] = t / d.H;
                row[i][1] = t % d.H + d.pad_h;
                row[i][2] = w + d.pad_w;
            } else {
                int t = m / d.C;
                row[i][0] = m % d.C;
                row[i][1] = t / d.S * d.dil_h - d.pad_h;
                row[i][2] = t % d.S * d.dil_w - d.pad_w;
            }
        }
        #pragma unroll
        for (int i = 0; i < (PASS == 2 ? NA : 1); ++i) {
            int mm, kk;
            nl_conv_a_slot<PASS, BM, BK, W>(threadIdx.x + i * THREADS, &mm, &kk);
            int k = k_begin + kk;
            if (PASS == 2) {
                int t = k / d.Q;
                step[i][0] = k % d.Q;
                step[i][1] = t % d.P;
                step[i][2] = t / d.P;
                step[i][3] = k;
            } else {
                int inner = PASS == 0 ? d.C : d.K, t = k / inner;
                step[i][0] = k % inner;
                step[i][1] = t % d.S;
                step[i][2] = t / d.S;
                kd = k;
            }
        }
    }

    // Move every kd on by one K step (BK).
    __device__ __forceinline__ void advance(const nl_conv_shape& d) {
        #pragma unroll
        for (int i = 0; i < (PASS == 2 ? NA : 1); ++i) {
            int* st = step[i];
            const int inner = PASS == 2 ? d.Q : (PASS == 0 ? d.C : d.K);
            const int middle = PASS == 2 ? d.P : d.S;
            st[0] += BK;
            while (st[0] >= inner) {
                st[0] -= inner;
                if (++st[1] == middle) { st[1] = 0; ++st[2]; }
            }
            if (PASS == 2) st[3] += BK;
        }
        if (PASS != 2) kd += BK;
    }

    // Offset of A group i at the current K step, -1 where it is 0 (or the group is not one).
    __device__ __forceinline__ long long a_at(const nl_conv_shape& d, int i, int k_end) const {
        if ((int)threadIdx.x + i * THREADS >= GA) return -1;
        if (PASS == 2) {
            const int* st = step[i];
            if (row[0][0] < 0 || st[3] >= k_end) return -1;
            int h = st[1] * d.str_h + row[0][1], w = st[0] * d.str_w + row[0][2];
            if (h < 0 || h >= d.H || w < 0 || w >= d.W) return -1;
            return (((long long)st[2] * d.H + h) * d.W + w) * d.C + row[0][0];
        }
        if (row[i][0] < 0 || kd >= k_end) return -1;
        const int c = step[0][0], s = step[0][1], r = step[0][2];
        if (PASS == 0) {
            int h = row[i][1] + r * d.dil_h, w = row[i][2] + s * d.dil_w;
            if (h < 0 || h >= d.H || w < 0 || w >= d.W) return -1;
            return (((long long)row[i][0] * d.H + h) * d.W + w) * d.C + c;
        }
        int p, q;
        int ph = row[i][1] - r * d.dil_h, qw = row[i][2] - s * d.dil_w;
        if (ph < 0 || qw < 0 || !nl_div_exact(ph, d.str_h, &p) ||
            !nl_div_exact(qw, d.str_w, &q) || p >= d.P || q >= d.Q) return -1;
        return (((long long)row[i][0] * d.P + p) * d.Q + q) * d.K + c;
    }

    // Offset of B group i at K step k0 (column j = j0 + its slot), -1 outside.
    __device__ __forceinline__ long long b_at(const nl_conv_shape& d, int i, int Ng, int j0,
                                              int k0, int k_end) const {
        if ((int)threadIdx.x + i * THREADS >= GB) return -1;
        int jj, kb;
        nl_conv_b_slot<PASS, BN, BK, W>(threadIdx.x + i * THREADS, &jj, &kb);
        int j = j0 + jj, k = k0 + kb;
        if (j >= Ng || k >= k_end) return -1;
        if (PASS == 1)
            return ((long long)(step[0][2] * d.S + step[0][1]) * d.C + j) * d.K + step[0][0];
        return (long long)k * d.K + j;
    }
};

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
    if (relu && acc < 0.0f) acc = 0.0f;  // a NaN stays NaN, as numpy's maximum keeps it
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
