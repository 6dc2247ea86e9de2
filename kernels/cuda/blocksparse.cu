// Block-sparse kernels (layouts and lookup tables as in neonlite/blocksparse/tables.py):
// products with a block-sparse weight (fprop, bprop through the transposed layout, weight
// gradient at the stored blocks only) and block-sparse attention (sampled dense-dense product,
// sparse x dense, row softmax and its gradient).
//
// Every product is one tile GEMM per thread block (128 threads, 4 warps): an output tile of TM x
// TN accumulates over K in steps of 16; each step stages As[TM][16] (row i, k contiguous) and
// Bs[TN][16] (column n, k contiguous) through loader functions of the global k, so a K that runs
// over the stored blocks of a row or column (k / bs = entry, k % bs = offset in the block) is
// one loop.  float16 / bfloat16 run mma.sync.aligned.m16n8k16 with float32 accumulation (sm_80
// and later); float32 runs on the CUDA cores.  m16n8k16 fragments (lane = 4 g + t):
//   A (16 x 16, row):  a[0] = row g, cols 2t, 2t+1; a[1] = row g+8; a[2] = cols + 8; a[3] both
//   B (16 x 8, col):   b[0] = rows (k) 2t, 2t+1 of column g; b[1] = rows + 8
//   C (16 x 8):        c[0], c[1] = row g, cols 2t, 2t+1; c[2], c[3] = row g+8
// The host emulator (tests/cuda_host_emulator.py) runs the same code with nl_mma_m16n8k16
// emulated.  Entry points nl_bs_<op>_<f32|f16|bf16>.
#include "neonlite_common.cuh"

#define NL_BS_THREADS 128
#define NL_BS_KC 16
#define NL_BS_LD (NL_BS_KC + 8)

__device__ __forceinline__ unsigned nl_bs_pair(const nl_u16* row, int col) {
    return (unsigned)row[col] | ((unsigned)row[col + 1] << 16);
}

// Shared memory of one tile GEMM, the largest case (TM = TN = 64, float32).
struct nl_bs_smem {
    float a[64 * (NL_BS_KC + 1)];
    float b[64 * (NL_BS_KC + 1)];
};

// out(i, n, v) for every (i < TM, n < TN) of the tile = sum over k < K of A(i, k) * B(k, n).
// A and B return raw storage elements (float, or 16-bit bits); the caller skips rows and
// columns outside its operands in ``out`` and returns zero for them in A and B.
template <int KIND, int TM, int TN, class LA, class LB, class OUT>
__device__ void nl_bs_tile(nl_bs_smem* sm, int K, LA A, LB B, OUT out) {
    typedef typename nl_elem<KIND>::T T;
    const int tid = threadIdx.x;
    if constexpr (KIND == 0) {
        float* As = sm->a;
        float* Bs = sm->b;
        constexpr int PER = TM * TN / NL_BS_THREADS;
        float acc[PER];
        for (int q = 0; q < PER; ++q) acc[q] = 0.0f;
        for (int k0 = 0; k0 < K; k0 += NL_BS_KC) {
            for (int idx = tid; idx < TM * NL_BS_KC; idx += NL_BS_THREADS) {
                const int i = idx / NL_BS_KC, k = idx % NL_BS_KC;
                As[i * (NL_BS_KC + 1) + k] = k0 + k < K ? A(i, k0 + k) : 0.0f;
            }
            for (int idx = tid; idx < TN * NL_BS_KC; idx += NL_BS_THREADS) {
                const int n = idx / NL_BS_KC, k = idx % NL_BS_KC;
                Bs[n * (NL_BS_KC + 1) + k] = k0 + k < K ? B(k0 + k, n) : 0.0f;
            }
            __syncthreads();
            for (int q = 0; q < PER; ++q) {
                const int o = tid + q * NL_BS_THREADS, i = o / TN, n = o % TN;
                float s = acc[q];
                for (int k = 0; k < NL_BS_KC; ++k)
                    s += As[i * (NL_BS_KC + 1) + k] * Bs[n * (NL_BS_KC + 1) + k];
                acc[q] = s;
            }
            __syncthreads();
        }
        for (int q = 0; q < PER; ++q) {
            const int o = tid + q * NL_BS_THREADS;
            out(o / TN, o % TN, acc[q]);
        }
    } else {
        nl_u16* As = reinterpret_cast<nl_u16*>(sm->a);
        nl_u16* Bs = reinterpret_cast<nl_u16*>(sm->b);
        constexpr int MT = TM / 16, NT = TN / 8, PAIRS = MT * NT;
        constexpr int PW = (PAIRS + 3) / 4;  // tile pairs per warp (every warp makes PW calls)
        const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
        float acc[PW][4];
        for (int p = 0; p < PW; ++p)
            for (int c = 0; c < 4; ++c) acc[p][c] = 0.0f;
        for (int k0 = 0; k0 < K; k0 += NL_BS_KC) {
            for (int idx = tid; idx < TM * NL_BS_KC; idx += NL_BS_THREADS) {
                const int i = idx / NL_BS_KC, k = idx % NL_BS_KC;
                As[i * NL_BS_LD + k] = k0 + k < K ? (nl_u16)A(i, k0 + k) : (nl_u16)0;
            }
            for (int idx = tid; idx < TN * NL_BS_KC; idx += NL_BS_THREADS) {
                const int n = idx / NL_BS_KC, k = idx % NL_BS_KC;
                Bs[n * NL_BS_LD + k] = k0 + k < K ? (nl_u16)B(k0 + k, n) : (nl_u16)0;
            }
            __syncthreads();
            for (int p = 0; p < PW; ++p) {
                const int pair = warp + 4 * p;
                const int mt = pair < PAIRS ? pair / NT : 0, nt = pair < PAIRS ? pair % NT : 0;
                const nl_u16* a0 = As + (mt * 16 + g) * NL_BS_LD;
                const nl_u16* a1 = As + (mt * 16 + g + 8) * NL_BS_LD;
                const nl_u16* b0 = Bs + (nt * 8 + g) * NL_BS_LD;
                unsigned a[4] = {nl_bs_pair(a0, 2 * t), nl_bs_pair(a1, 2 * t),
                                 nl_bs_pair(a0, 2 * t + 8), nl_bs_pair(a1, 2 * t + 8)};
                unsigned b[2] = {nl_bs_pair(b0, 2 * t), nl_bs_pair(b0, 2 * t + 8)};
                nl_mma_m16n8k16<KIND>(acc[p], a, b);
            }
            __syncthreads();
        }
        for (int p = 0; p < PW; ++p) {
            const int pair = warp + 4 * p;
            if (pair >= PAIRS) continue;
            const int i = (pair / NT) * 16 + g, n = (pair % NT) * 8 + 2 * t;
            out(i, n, acc[p][0]);
            out(i, n + 1, acc[p][1]);
            out(i + 8, n, acc[p][2]);
            out(i + 8, n + 1, acc[p][3]);
        }
    }
}

// Dispatch on the block size bs (8, 16, 32, 64): CALL(BS) runs the body compiled for it, so
// the k / bs and k % bs of the loaders are shifts and masks.
#define NL_BS_SWITCH(bs, CALL)                                                               \
    switch (bs) {                                                                            \
    case 8: CALL(8); break;                                                                  \
    case 16: CALL(16); break;                                                                \
    case 32: CALL(32); break;                                                                \
    default: CALL(64); break;                                                                \
    }

// The tile height for a block of BS rows: mma tiles are 16 rows high.
template <int BS> struct nl_bs_rows { static constexpr int value = BS < 16 ? 16 : BS; };

// ---- products with a block-sparse weight ---------------------------------------------------------
// y (M, nb_out*bs) = x (M, nb_in*bs) @ W + beta * y, walking output block column c = blockIdx.y:
// entries e = ptr[c] .. ptr[c+1]-1 name block kidx[e] of w (nnz, bs, bs) at input block
// other[e]; transw uses each block transposed (bprop: the row walk with W^T).  A tile is 64 rows.
template <int KIND, int BS>
__device__ void nl_bs_product_body(nl_bs_smem* sm, const typename nl_elem<KIND>::T* x,
                                   const typename nl_elem<KIND>::T* w,
                                   typename nl_elem<KIND>::T* y, int M, int nb_in, int nb_out,
                                   const int* ptr, const int* kidx, const int* other,
                                   int transw, float beta) {
    typedef nl_elem<KIND> E;
    const int c = blockIdx.y, m0 = blockIdx.x * 64;
    const int lo = ptr[c], K = (ptr[c + 1] - lo) * BS;
    const long long ldx = (long long)nb_in * BS, ldy = (long long)nb_out * BS;
    auto A = [&](int i, int k) {
        return m0 + i < M ? x[(long long)(m0 + i) * ldx + (long long)other[lo + k / BS] * BS +
                              k % BS]
                          : (typename E::T)0;
    };
    auto B = [&](int k, int n) {
        const long long blk = (long long)kidx[lo + k / BS] * BS * BS;
        const int kk = k % BS;
        return n < BS ? w[blk + (transw ? n * BS + kk : kk * BS + n)] : (typename E::T)0;
    };
    auto out = [&](int i, int n, float v) {
        if (m0 + i >= M || n >= BS) return;
        const long long at = (long long)(m0 + i) * ldy + (long long)c * BS + n;
        E::store(y, at, beta != 0.0f ? v + beta * E::load(y, at) : v);
    };
    nl_bs_tile<KIND, 64, BS>(sm, K, A, B, out);
}

template <int KIND>
__device__ void nl_bs_product_impl(const typename nl_elem<KIND>::T* x,
                                   const typename nl_elem<KIND>::T* w,
                                   typename nl_elem<KIND>::T* y, int M, int nb_in, int nb_out,
                                   int bs, const int* ptr, const int* kidx, const int* other,
                                   int transw, float beta) {
    __shared__ nl_bs_smem sm;
#define NL_BS_CALL(BS) nl_bs_product_body<KIND, BS>(&sm, x, w, y, M, nb_in, nb_out, ptr, kidx, \
                                                    other, transw, beta)
    NL_BS_SWITCH(bs, NL_BS_CALL)
#undef NL_BS_CALL
}

#define BS_PRODUCT_PARAMS(T) const T* x, const T* w, T* y, int M, int nb_in, int nb_out, int bs, \
    const int* ptr, const int* kidx, const int* other, int transw, float beta
NL_THREE_TYPES(nl_bs_product, BS_PRODUCT_PARAMS, (x, w, y, M, nb_in, nb_out, bs, ptr, kidx,
                                                 other, transw, beta))

// dw[k] (bs, bs) = x[:, row[k]]^T @ e[:, col[k]] + beta * dw[k] for block k = blockIdx.x,
// summing over the M rows (K = M).
template <int KIND, int BS>
__device__ void nl_bs_update_body(nl_bs_smem* sm, const typename nl_elem<KIND>::T* x,
                                  const typename nl_elem<KIND>::T* e,
                                  typename nl_elem<KIND>::T* dw, int M, int nin, int nout,
                                  const int* row, const int* col, float beta) {
    typedef nl_elem<KIND> E;
    const int k = blockIdx.x;
    const long long r0 = (long long)row[k] * BS, c0 = (long long)col[k] * BS;
    auto A = [&](int i, int m) {
        return i < BS ? x[(long long)m * nin + r0 + i] : (typename E::T)0;
    };
    auto B = [&](int m, int n) {
        return n < BS ? e[(long long)m * nout + c0 + n] : (typename E::T)0;
    };
    auto out = [&](int i, int n, float v) {
        if (i >= BS || n >= BS) return;
        const long long at = (long long)k * BS * BS + i * BS + n;
        E::store(dw, at, beta != 0.0f ? v + beta * E::load(dw, at) : v);
    };
    nl_bs_tile<KIND, nl_bs_rows<BS>::value, BS>(sm, M, A, B, out);
}

template <int KIND>
__device__ void nl_bs_update_impl(const typename nl_elem<KIND>::T* x,
                                  const typename nl_elem<KIND>::T* e,
                                  typename nl_elem<KIND>::T* dw, int M, int nin, int nout,
                                  int bs, const int* row, const int* col, float beta) {
    __shared__ nl_bs_smem sm;
#define NL_BS_CALL(BS) nl_bs_update_body<KIND, BS>(&sm, x, e, dw, M, nin, nout, row, col, beta)
    NL_BS_SWITCH(bs, NL_BS_CALL)
#undef NL_BS_CALL
}

#define BS_UPDATE_PARAMS(T) const T* x, const T* e, T* dw, int M, int nin, int nout, int bs, \
    const int* row, const int* col, float beta
NL_THREE_TYPES(nl_bs_update, BS_UPDATE_PARAMS, (x, e, dw, M, nin, nout, bs, row, col, beta))

// ---- block-sparse attention ------------------------------------------------------------------
// s[n, k] (bs, bs) = alpha * a[n, h, i] @ b[n, h, j]^T for block k = blockIdx.x at (head[k],
// row[k], col[k]) and n = blockIdx.y; a (N, H, Tq, d), b (N, H, Tk, d).
template <int KIND, int BS>
__device__ void nl_bs_sdd_body(nl_bs_smem* sm, const typename nl_elem<KIND>::T* a,
                               const typename nl_elem<KIND>::T* b, typename nl_elem<KIND>::T* s,
                               int H, int Tq, int Tk, int d, int nnz, const int* head,
                               const int* row, const int* col, float alpha) {
    typedef nl_elem<KIND> E;
    const int k = blockIdx.x, n = blockIdx.y, h = head[k];
    const typename E::T* ab = a + (((long long)n * H + h) * Tq + (long long)row[k] * BS) * d;
    const typename E::T* bb = b + (((long long)n * H + h) * Tk + (long long)col[k] * BS) * d;
    typename E::T* sb = s + ((long long)n * nnz + k) * BS * BS;
    auto A = [&](int i, int q) { return i < BS ? ab[(long long)i * d + q] : (typename E::T)0; };
    auto B = [&](int q, int j) { return j < BS ? bb[(long long)j * d + q] : (typename E::T)0; };
    auto out = [&](int i, int j, float v) {
        if (i < BS && j < BS) E::store(sb, i * BS + j, alpha * v);
    };
    nl_bs_tile<KIND, nl_bs_rows<BS>::value, BS>(sm, d, A, B, out);
}

template <int KIND>
__device__ void nl_bs_sdd_impl(const typename nl_elem<KIND>::T* a,
                               const typename nl_elem<KIND>::T* b, typename nl_elem<KIND>::T* s,
                               int H, int Tq, int Tk, int d, int bs, int nnz, const int* head,
                               const int* row, const int* col, float alpha) {
    __shared__ nl_bs_smem sm;
#define NL_BS_CALL(BS) nl_bs_sdd_body<KIND, BS>(&sm, a, b, s, H, Tq, Tk, d, nnz, head, row, col, \
                                                alpha)
    NL_BS_SWITCH(bs, NL_BS_CALL)
#undef NL_BS_CALL
}

#define BS_SDD_PARAMS(T) const T* a, const T* b, T* s, int H, int Tq, int Tk, int d, int bs, \
    int nnz, const int* head, const int* row, const int* col, float alpha
NL_THREE_TYPES(nl_bs_sdd, BS_SDD_PARAMS, (a, b, s, H, Tq, Tk, d, bs, nnz, head, row, col, alpha))

// o[n, h, i] (bs, d) = P @ b (or P^T @ b when transposed) + beta * o, for output block
// blockIdx.x = h * (Tout / bs) + i, n = blockIdx.y, columns 64 * blockIdx.z .. + 63 of d;
// entries ptr[ob] .. ptr[ob+1]-1 name block kidx[e] of p (N, nnz, bs, bs) and block other[e]
// of b (N, H, Tin, d).
template <int KIND, int BS>
__device__ void nl_bs_dsd_body(nl_bs_smem* sm, const typename nl_elem<KIND>::T* p,
                               const typename nl_elem<KIND>::T* b, typename nl_elem<KIND>::T* o,
                               int H, int Tin, int Tout, int d, int nnz, const int* ptr,
                               const int* kidx, const int* other, int transposed, float beta) {
    typedef nl_elem<KIND> E;
    const int ob = blockIdx.x, n = blockIdx.y, d0 = blockIdx.z * 64;
    const int h = ob / (Tout / BS), i0 = (ob % (Tout / BS)) * BS;
    const int lo = ptr[ob], K = (ptr[ob + 1] - lo) * BS;
    const typename E::T* pb = p + (long long)n * nnz * BS * BS;
    const typename E::T* bb = b + ((long long)n * H + h) * Tin * d;
    typename E::T* obase = o + (((long long)n * H + h) * Tout + i0) * d;
    auto A = [&](int i, int k) {
        const long long blk = (long long)kidx[lo + k / BS] * BS * BS;
        const int kk = k % BS;
        return i < BS ? pb[blk + (transposed ? kk * BS + i : i * BS + kk)] : (typename E::T)0;
    };
    auto B = [&](int k, int j) {
        const long long r = (long long)other[lo + k / BS] * BS + k % BS;
        return d0 + j < d ? bb[r * d + d0 + j] : (typename E::T)0;
    };
    auto out = [&](int i, int j, float v) {
        if (i >= BS || d0 + j >= d) return;
        const long long at = (long long)i * d + d0 + j;
        E::store(obase, at, beta != 0.0f ? v + beta * E::load(obase, at) : v);
    };
    nl_bs_tile<KIND, nl_bs_rows<BS>::value, 64>(sm, K, A, B, out);
}

template <int KIND>
__device__ void nl_bs_dsd_impl(const typename nl_elem<KIND>::T* p,
                               const typename nl_elem<KIND>::T* b, typename nl_elem<KIND>::T* o,
                               int H, int Tin, int Tout, int d, int bs, int nnz, const int* ptr,
                               const int* kidx, const int* other, int transposed, float beta) {
    __shared__ nl_bs_smem sm;
#define NL_BS_CALL(BS) nl_bs_dsd_body<KIND, BS>(&sm, p, b, o, H, Tin, Tout, d, nnz, ptr, kidx, \
                                                other, transposed, beta)
    NL_BS_SWITCH(bs, NL_BS_CALL)
#undef NL_BS_CALL
}

#define BS_DSD_PARAMS(T) const T* p, const T* b, T* o, int H, int Tin, int Tout, int d, int bs, \
    int nnz, const int* ptr, const int* kidx, const int* other, int transposed, float beta
NL_THREE_TYPES(nl_bs_dsd, BS_DSD_PARAMS, (p, b, o, H, Tin, Tout, d, bs, nnz, ptr, kidx, other,
                                         transposed, beta))

// p = softmax(scale * s) over row of blocks blockIdx.x (entries ptr[rw] .. ptr[rw+1]-1) of
// example n = blockIdx.y; thread r < bs owns query row r of the block row.  causal hides
// column c of block k when col[k]*bs + c > row[k]*bs + r + off.  p may be s.
template <int KIND>
__device__ void nl_bs_softmax_impl(const typename nl_elem<KIND>::T* s,
                                   typename nl_elem<KIND>::T* p, int bs, int nnz, int off,
                                   const int* ptr, const int* brow, const int* bcol,
                                   float scale, int causal) {
    typedef nl_elem<KIND> E;
    const int rw = blockIdx.x, n = blockIdx.y, r = threadIdx.x;
    if (r >= bs) return;
    const int lo = ptr[rw], hi = ptr[rw + 1];
    const long long base = (long long)n * nnz * bs * bs + (long long)r * bs;
    float top = -INFINITY;
    for (int k = lo; k < hi; ++k) {
        const int last = causal ? brow[k] * bs + r + off - bcol[k] * bs : bs - 1;
        for (int c = 0; c < bs && c <= last; ++c)
            top = nl_max(top, scale * E::load(s, base + (long long)k * bs * bs + c));
    }
    if (top == -INFINITY) top = 0.0f;
    float total = 0.0f;
    for (int k = lo; k < hi; ++k) {
        const int last = causal ? brow[k] * bs + r + off - bcol[k] * bs : bs - 1;
        for (int c = 0; c < bs && c <= last; ++c)
            total += expf(scale * E::load(s, base + (long long)k * bs * bs + c) - top);
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int k = lo; k < hi; ++k) {
        const int last = causal ? brow[k] * bs + r + off - bcol[k] * bs : bs - 1;
        for (int c = 0; c < bs; ++c) {
            const long long at = base + (long long)k * bs * bs + c;
            E::store(p, at, c <= last ? expf(scale * E::load(s, at) - top) * inv : 0.0f);
        }
    }
}

#define BS_SOFTMAX_PARAMS(T) const T* s, T* p, int bs, int nnz, int off, const int* ptr, \
    const int* brow, const int* bcol, float scale, int causal
NL_THREE_TYPES(nl_bs_softmax, BS_SOFTMAX_PARAMS, (s, p, bs, nnz, off, ptr, brow, bcol, scale,
                                                 causal))

// ds = scale * p * (dp - rowsum(dp * p)) over the rows of nl_bs_softmax; ds may be dp.
template <int KIND>
__device__ void nl_bs_softmax_bprop_impl(const typename nl_elem<KIND>::T* p,
                                         const typename nl_elem<KIND>::T* dp,
                                         typename nl_elem<KIND>::T* ds, int bs, int nnz,
                                         const int* ptr, float scale) {
    typedef nl_elem<KIND> E;
    const int rw = blockIdx.x, n = blockIdx.y, r = threadIdx.x;
    if (r >= bs) return;
    const int lo = ptr[rw], hi = ptr[rw + 1];
    const long long base = (long long)n * nnz * bs * bs + (long long)r * bs;
    float dot = 0.0f;
    for (int k = lo; k < hi; ++k)
        for (int c = 0; c < bs; ++c) {
            const long long at = base + (long long)k * bs * bs + c;
            dot += E::load(dp, at) * E::load(p, at);
        }
    for (int k = lo; k < hi; ++k)
        for (int c = 0; c < bs; ++c) {
            const long long at = base + (long long)k * bs * bs + c;
            E::store(ds, at, scale * E::load(p, at) * (E::load(dp, at) - dot));
        }
}

#define BS_SOFTMAX_BPROP_PARAMS(T) const T* p, const T* dp, T* ds, int bs, int nnz, \
    const int* ptr, float scale
NL_THREE_TYPES(nl_bs_softmax_bprop, BS_SOFTMAX_BPROP_PARAMS, (p, dp, ds, bs, nnz, ptr, scale))
