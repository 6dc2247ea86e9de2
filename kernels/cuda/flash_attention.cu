// Fused attention (the contract's Backend.attention / attention_bprop) on head-major slices:
// q (B, Tq, dk), k (B, Tk, dk), v (B, Tk, dv), out (B, Tq, dv), lse (B, Tq) float32; B = N * H.
// Tiles of FA_T queries x FA_T keys, head widths dk, dv <= FA_D; the tiles a query block
// visits come from the tables of backends/cpu_attention.py:visit_tables (row_ptr / cols per
// query block, col_ptr / rows per key block; table_heads 1 or H).  Masks as the CPU kernels:
// causal (key j <= i + Tk - Tq), key_mask (N, Tk; NULL: none), unvisited tiles.  The forward
// pass of float16 / bfloat16 runs its two products on tensor cores (mma.sync m16n8k16, float32
// accumulation); everything else is float32 on the CUDA cores.  Online softmax in base 2.
//
//   nl_fa_fprop:   grid (Tq/FA_T, B): a query block's output accumulates in registers (each
//                  thread a row and every 4th column) while the key blocks stream through
//                  shared memory.
//   nl_fa_bprop_kv: grid (Tk/FA_T, B): dK, dV of a key block over the query blocks visiting it.
//   nl_fa_bprop_q:  grid (Tq/FA_T, B): dQ of a query block over its key blocks.
// Each output element is one sequential sum in a fixed order: no atomics, deterministic.
#include "neonlite_common.cuh"

#define FA_T 32
#define FA_D 64
#define FA_THREADS 128
#define FA_COLS (FA_D * FA_T / FA_THREADS)  // columns of a row per thread
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// rows [r0, r0 + n) of a (rows, d) slice at `src` into tile[FA_T][FA_D + 1] (zeros past n).
template <int KIND>
__device__ __forceinline__ void fa_load_tile(float (*tile)[FA_D + 1],
                                             const typename nl_elem<KIND>::T* src, long long r0,
                                             int n, int d) {
    for (int e = threadIdx.x; e < FA_T * FA_D; e += FA_THREADS) {
        int row = e / FA_D, col = e % FA_D;
        tile[row][col] = (row < n && col < d) ? nl_elem<KIND>::load(src, (r0 + row) * d + col)
                                              : 0.0f;
    }
}

template <int KIND>
__device__ __forceinline__ bool fa_visible(int i, int j, int nr, int nc, int i0, int j0, int off,
                                           int causal, const typename nl_elem<KIND>::T* km) {
    return i < nr && j < nc && (!causal || j0 + j <= i0 + i + off) &&
           (km == nullptr || nl_elem<KIND>::load(km, j0 + j) != 0.0f);
}

template <int KIND>
__device__ void fa_fprop_simt(const typename nl_elem<KIND>::T* q,
                                 const typename nl_elem<KIND>::T* k,
                                 const typename nl_elem<KIND>::T* v, typename nl_elem<KIND>::T* out,
                                 float* lse, int H, int Tq, int Tk, int dk, int dv,
                                 long long sq, long long sk, long long sv, long long so,
                                 float scale, int causal, const typename nl_elem<KIND>::T* key_mask,
                                 const int* row_ptr, const int* cols, int table_heads) {
    __shared__ float qs[FA_T][FA_D + 1], kv[FA_T][FA_D + 1], ss[FA_T][FA_T + 1];
    __shared__ float ms[FA_T], ls[FA_T], as[FA_T];
    const int b = blockIdx.y, r = blockIdx.x, nqb = (Tq + FA_T - 1) / FA_T, tid = threadIdx.x;
    const int i0 = r * FA_T, nr = min(FA_T, Tq - i0), off = Tk - Tq;
    const int t = table_heads == 1 ? 0 : b % H, ro = tid / 4;
    const float sc2 = scale * FA_LOG2E;
    const typename nl_elem<KIND>::T* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_tile<KIND>(qs, q + b * sq, i0, nr, dk);
    if (tid < FA_T) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float acc[FA_COLS];
    for (int j = 0; j < FA_COLS; ++j) acc[j] = 0.0f;
    __syncthreads();
    for (int e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; ++e) {
        const int j0 = cols[e] * FA_T, nc = min(FA_T, Tk - j0);
        fa_load_tile<KIND>(kv, k + b * sk, j0, nc, dk);
        __syncthreads();
        for (int x = tid; x < FA_T * FA_T; x += FA_THREADS) {
            int i = x / FA_T, c = x % FA_T;
            float s = 0.0f;
            for (int d = 0; d < dk; ++d) s += qs[i][d] * kv[c][d];
            ss[i][c] = fa_visible<KIND>(i, c, nr, nc, i0, j0, off, causal, km) ? s * sc2
                                                                                : -INFINITY;
        }
        __syncthreads();
        if (tid < FA_T) {
            float top = ms[tid];
            for (int c = 0; c < FA_T; ++c) top = fmaxf(top, ss[tid][c]);
            const float safe = top == -INFINITY ? 0.0f : top, alpha = exp2f(ms[tid] - safe);
            float sum = 0.0f;
            for (int c = 0; c < FA_T; ++c) {
                const float p = exp2f(ss[tid][c] - safe);
                ss[tid][c] = p;
                sum += p;
            }
            ls[tid] = ls[tid] * alpha + sum;
            ms[tid] = top;
            as[tid] = alpha;
        }
        __syncthreads();
        fa_load_tile<KIND>(kv, v + b * sv, j0, nc, dv);
        __syncthreads();
        for (int j = 0; j < FA_COLS; ++j) {
            const int col = tid % 4 + 4 * j;
            float a = acc[j] * as[ro];
            for (int c = 0; c < FA_T; ++c) a += ss[ro][c] * kv[c][col];
            acc[j] = a;
        }
        __syncthreads();
    }
    if (ro < nr) {
        const float inv = ls[ro] > 0.0f ? 1.0f / ls[ro] : 0.0f;
        for (int j = 0; j < FA_COLS; ++j) {
            const int col = tid % 4 + 4 * j;
            if (col < dv)
                nl_elem<KIND>::store(out + b * so, (long long)(i0 + ro) * dv + col, acc[j] * inv);
        }
    }
    if (tid < nr)
        lse[(long long)b * Tq + i0 + tid] =
            ls[tid] > 0.0f ? (ms[tid] + log2f(ls[tid])) * FA_LN2 : -INFINITY;
}

// Two 16-bit values (x low, y high) of storage KIND (1 float16, 2 bfloat16) in one register.
template <int KIND>
__device__ __forceinline__ unsigned fa_pack(float x, float y) {
    const unsigned lo = KIND == 1 ? nl_f32_to_f16(x) : nl_f32_to_bf16(x);
    const unsigned hi = KIND == 1 ? nl_f32_to_f16(y) : nl_f32_to_bf16(y);
    return (lo & 0xFFFFu) | (hi << 16);
}

// The forward pass with both products on tensor cores (float16 / bfloat16 inputs, float32
// accumulation; P rounded to the storage type for the second).  Warp w takes query rows
// 16 * (w / 2) ..: scores of keys 16 * (w % 2) .. (two m16n8k16 tiles) and output columns
// 32 * (w % 2) .. (four tiles), its accumulators in the mma.sync fragment layout.
template <int KIND>
__device__ void fa_fprop_tc(const typename nl_elem<KIND>::T* q,
                            const typename nl_elem<KIND>::T* k,
                            const typename nl_elem<KIND>::T* v, typename nl_elem<KIND>::T* out,
                            float* lse, int H, int Tq, int Tk, int dk, int dv, long long sq,
                            long long sk, long long sv, long long so, float scale, int causal,
                            const typename nl_elem<KIND>::T* key_mask, const int* row_ptr,
                            const int* cols, int table_heads) {
    __shared__ float qs[FA_T][FA_D + 1], kv[FA_T][FA_D + 1], ss[FA_T][FA_T + 1];
    __shared__ float ms[FA_T], ls[FA_T], as[FA_T];
    const int b = blockIdx.y, r = blockIdx.x, nqb = (Tq + FA_T - 1) / FA_T, tid = threadIdx.x;
    const int i0 = r * FA_T, nr = min(FA_T, Tq - i0), off = Tk - Tq;
    const int t = table_heads == 1 ? 0 : b % H;
    const int lane = tid % 32, g = lane / 4, tq = lane % 4, r0 = 16 * (tid / 64), half = (tid / 32) % 2;
    const int ksteps = (dk + 15) / 16;
    const float sc2 = scale * FA_LOG2E;
    const typename nl_elem<KIND>::T* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_tile<KIND>(qs, q + b * sq, i0, nr, dk);
    if (tid < FA_T) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float o[4][4];
    for (int n = 0; n < 4; ++n)
        for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
    __syncthreads();
    for (int e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; ++e) {
        const int j0 = cols[e] * FA_T, nc = min(FA_T, Tk - j0);
        fa_load_tile<KIND>(kv, k + b * sk, j0, nc, dk);
        __syncthreads();
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        for (int ks = 0; ks < ksteps; ++ks) {
            const int c = 16 * ks + 2 * tq;
            const unsigned a[4] = {fa_pack<KIND>(qs[r0 + g][c], qs[r0 + g][c + 1]),
                                   fa_pack<KIND>(qs[r0 + g + 8][c], qs[r0 + g + 8][c + 1]),
                                   fa_pack<KIND>(qs[r0 + g][c + 8], qs[r0 + g][c + 9]),
                                   fa_pack<KIND>(qs[r0 + g + 8][c + 8], qs[r0 + g + 8][c + 9])};
            for (int n = 0; n < 2; ++n) {
                const int key = 16 * half + 8 * n + g;
                const unsigned bf[2] = {fa_pack<KIND>(kv[key][c], kv[key][c + 1]),
                                        fa_pack<KIND>(kv[key][c + 8], kv[key][c + 9])};
                nl_mma_m16n8k16<KIND>(s[n], a, bf);
            }
        }
        for (int n = 0; n < 2; ++n)
            for (int x = 0; x < 4; ++x) {
                const int i = r0 + g + (x >= 2 ? 8 : 0), c = 16 * half + 8 * n + 2 * tq + (x & 1);
                ss[i][c] = fa_visible<KIND>(i, c, nr, nc, i0, j0, off, causal, km)
                               ? s[n][x] * sc2 : -INFINITY;
            }
        __syncthreads();
        if (tid < FA_T) {
            float top = ms[tid];
            for (int c = 0; c < FA_T; ++c) top = fmaxf(top, ss[tid][c]);
            const float safe = top == -INFINITY ? 0.0f : top, alpha = exp2f(ms[tid] - safe);
            float sum = 0.0f;
            for (int c = 0; c < FA_T; ++c) {
                const float p = exp2f(ss[tid][c] - safe);
                ss[tid][c] = p;
                sum += p;
            }
            ls[tid] = ls[tid] * alpha + sum;
            ms[tid] = top;
            as[tid] = alpha;
        }
        __syncthreads();
        fa_load_tile<KIND>(kv, v + b * sv, j0, nc, dv);
        __syncthreads();
        for (int n = 0; n < 4; ++n)
            for (int x = 0; x < 4; ++x) o[n][x] *= as[r0 + g + (x >= 2 ? 8 : 0)];
        for (int ks = 0; ks < FA_T / 16; ++ks) {
            const int c = 16 * ks + 2 * tq;
            const unsigned a[4] = {fa_pack<KIND>(ss[r0 + g][c], ss[r0 + g][c + 1]),
                                   fa_pack<KIND>(ss[r0 + g + 8][c], ss[r0 + g + 8][c + 1]),
                                   fa_pack<KIND>(ss[r0 + g][c + 8], ss[r0 + g][c + 9]),
                                   fa_pack<KIND>(ss[r0 + g + 8][c + 8], ss[r0 + g + 8][c + 9])};
            for (int n = 0; n < 4; ++n) {
                const int col = 32 * half + 8 * n + g;
                const unsigned bf[2] = {fa_pack<KIND>(kv[c][col], kv[c + 1][col]),
                                        fa_pack<KIND>(kv[c + 8][col], kv[c + 9][col])};
                nl_mma_m16n8k16<KIND>(o[n], a, bf);
            }
        }
        __syncthreads();
    }
    for (int n = 0; n < 4; ++n)
        for (int x = 0; x < 4; ++x) {
            const int i = r0 + g + (x >= 2 ? 8 : 0), col = 32 * half + 8 * n + 2 * tq + (x & 1);
            if (i < nr && col < dv)
                nl_elem<KIND>::store(out + b * so, (long long)(i0 + i) * dv + col,
                                     ls[i] > 0.0f ? o[n][x] / ls[i] : 0.0f);
        }
    if (tid < nr)
        lse[(long long)b * Tq + i0 + tid] =
            ls[tid] > 0.0f ? (ms[tid] + log2f(ls[tid])) * FA_LN2 : -INFINITY;
}

// float32 on the CUDA cores, float16 / bfloat16 on tensor cores.
template <int KIND>
__device__ void nl_fa_fprop_impl(const typename nl_elem<KIND>::T* q,
                                 const typename nl_elem<KIND>::T* k,
                                 const typename nl_elem<KIND>::T* v, typename nl_elem<KIND>::T* out,
                                 float* lse, int H, int Tq, int Tk, int dk, int dv,
                                 long long sq, long long sk, long long sv, long long so,
                                 float scale, int causal, const typename nl_elem<KIND>::T* key_mask,
                                 const int* row_ptr, const int* cols, int table_heads) {
    if constexpr (KIND == 0)
        fa_fprop_simt<KIND>(q, k, v, out, lse, H, Tq, Tk, dk, dv, sq, sk, sv, so, scale, causal,
                            key_mask, row_ptr, cols, table_heads);
    else
        fa_fprop_tc<KIND>(q, k, v, out, lse, H, Tq, Tk, dk, dv, sq, sk, sv, so, scale, causal,
                          key_mask, row_ptr, cols, table_heads);
}

// Rows [i0, i0 + nr) of dO and q into shared tiles, with D = rowsum(dO * O) and lse in base 2.
template <int KIND>
__device__ __forceinline__ void fa_load_queries(
    float (*qs)[FA_D + 1], float (*dos)[FA_D + 1], float* Ds, float* Ls,
    const typename nl_elem<KIND>::T* q, const typename nl_elem<KIND>::T* out,
    const typename nl_elem<KIND>::T* dout, const float* lse, int b, int Tq, int i0, int nr,
    int dk, int dv) {
    fa_load_tile<KIND>(qs, q + (long long)b * Tq * dk, i0, nr, dk);
    fa_load_tile<KIND>(dos, dout + (long long)b * Tq * dv, i0, nr, dv);
    __syncthreads();
    if (threadIdx.x < FA_T) {
        const int i = threadIdx.x;
        float D = 0.0f, L = INFINITY;  // rows past the end or with no visible key: P = 0
        if (i < nr) {
            const long long row = (long long)b * Tq + i0 + i;
            for (int d = 0; d < dv; ++d) D += dos[i][d] * nl_elem<KIND>::load(out, row * dv + d);
            if (lse[row] != -INFINITY) L = lse[row] * FA_LOG2E;
        }
        Ds[threadIdx.x] = D;
        Ls[threadIdx.x] = L;
    }
    __syncthreads();
}

// P and dS = scale * P * (dO v^T - D) of one tile into ps / dss.
template <int KIND>
__device__ __forceinline__ void fa_tile_grads(
    float (*ps)[FA_T + 1], float (*dss)[FA_T + 1], float (*qs)[FA_D + 1], float (*dos)[FA_D + 1],
    float (*ks)[FA_D + 1], float (*vs)[FA_D + 1], const float* Ds, const float* Ls, int nr,
    int nc, int i0, int j0, int off, int causal, const typename nl_elem<KIND>::T* km, int dk,
    int dv, float scale) {
    const float sc2 = scale * FA_LOG2E;
    for (int x = threadIdx.x; x < FA_T * FA_T; x += FA_THREADS) {
        int i = x / FA_T, c = x % FA_T;
        float p = 0.0f, dp = 0.0f;
        if (fa_visible<KIND>(i, c, nr, nc, i0, j0, off, causal, km)) {
            float s = 0.0f;
            for (int d = 0; d < dk; ++d) s += qs[i][d] * ks[c][d];
            p = exp2f(s * sc2 - Ls[i]);
            for (int d = 0; d < dv; ++d) dp += dos[i][d] * vs[c][d];
        }
        ps[i][c] = p;
        dss[i][c] = scale * p * (dp - Ds[i]);
    }
    __syncthreads();
}

template <int KIND>
__device__ void nl_fa_bprop_kv_impl(const typename nl_elem<KIND>::T* q,
                                    const typename nl_elem<KIND>::T* k,
                                    const typename nl_elem<KIND>::T* v,
                                    const typename nl_elem<KIND>::T* out, const float* lse,
                                    const typename nl_elem<KIND>::T* dout,
                                    typename nl_elem<KIND>::T* dkey,
                                    typename nl_elem<KIND>::T* dval, int H, int Tq, int Tk, int dk,
                                    int dv, float scale, int causal,
                                    const typename nl_elem<KIND>::T* key_mask, const int* col_ptr,
                                    const int* rows, int table_heads) {
    __shared__ float ks[FA_T][FA_D + 1], vs[FA_T][FA_D + 1], qs[FA_T][FA_D + 1];
    __shared__ float dos[FA_T][FA_D + 1], ps[FA_T][FA_T + 1], dss[FA_T][FA_T + 1];
    __shared__ float Ds[FA_T], Ls[FA_T];
    const int b = blockIdx.y, c = blockIdx.x, nkb = (Tk + FA_T - 1) / FA_T, tid = threadIdx.x;
    const int j0 = c * FA_T, nc = min(FA_T, Tk - j0), off = Tk - Tq, ro = tid / 4;
    const int t = table_heads == 1 ? 0 : b % H;
    const typename nl_elem<KIND>::T* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_tile<KIND>(ks, k + (long long)b * Tk * dk, j0, nc, dk);
    fa_load_tile<KIND>(vs, v + (long long)b * Tk * dv, j0, nc, dv);
    float gk[FA_COLS], gv[FA_COLS];
    for (int j = 0; j < FA_COLS; ++j) gk[j] = gv[j] = 0.0f;
    for (int e = col_ptr[t * nkb + c]; e < col_ptr[t * nkb + c + 1]; ++e) {
        const int i0 = rows[e] * FA_T, nr = min(FA_T, Tq - i0);
        fa_load_queries<KIND>(qs, dos, Ds, Ls, q, out, dout, lse, b, Tq, i0, nr, dk, dv);
        fa_tile_grads<KIND>(ps, dss, qs, dos, ks, vs, Ds, Ls, nr, nc, i0, j0, off, causal, km,
                            dk, dv, scale);
        for (int j = 0; j < FA_COLS; ++j) {
            const int col = tid % 4 + 4 * j;
            float a = gv[j], g = gk[j];
            for (int i = 0; i < FA_T; ++i) {
                a += ps[i][ro] * dos[i][col];
                g += dss[i][ro] * qs[i][col];
            }
            gv[j] = a;
            gk[j] = g;
        }
        __syncthreads();
    }
    if (ro < nc) {
        const long long row = (long long)b * Tk + j0 + ro;
        for (int j = 0; j < FA_COLS; ++j) {
            const int col = tid % 4 + 4 * j;
            if (col < dk) nl_elem<KIND>::store(dkey, row * dk + col, gk[j]);
            if (col < dv) nl_elem<KIND>::store(dval, row * dv + col, gv[j]);
        }
    }
}

template <int KIND>
__device__ void nl_fa_bprop_q_impl(const typename nl_elem<KIND>::T* q,
                                   const typename nl_elem<KIND>::T* k,
                                   const typename nl_elem<KIND>::T* v,
                                   const typename nl_elem<KIND>::T* out, const float* lse,
                                   const typename nl_elem<KIND>::T* dout,
                                   typename nl_elem<KIND>::T* dq, int H, int Tq, int Tk, int dk,
                                   int dv, float scale, int causal,
                                   const typename nl_elem<KIND>::T* key_mask, const int* row_ptr,
                                   const int* cols, int table_heads) {
    __shared__ float ks[FA_T][FA_D + 1], vs[FA_T][FA_D + 1], qs[FA_T][FA_D + 1];
    __shared__ float dos[FA_T][FA_D + 1], ps[FA_T][FA_T + 1], dss[FA_T][FA_T + 1];
    __shared__ float Ds[FA_T], Ls[FA_T];
    const int b = blockIdx.y, r = blockIdx.x, nqb = (Tq + FA_T - 1) / FA_T, tid = threadIdx.x;
    const int i0 = r * FA_T, nr = min(FA_T, Tq - i0), off = Tk - Tq, ro = tid / 4;
    const int t = table_heads == 1 ? 0 : b % H;
    const typename nl_elem<KIND>::T* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_queries<KIND>(qs, dos, Ds, Ls, q, out, dout, lse, b, Tq, i0, nr, dk, dv);
    float g[FA_COLS];
    for (int j = 0; j < FA_COLS; ++j) g[j] = 0.0f;
    for (int e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; ++e) {
        const int j0 = cols[e] * FA_T, nc = min(FA_T, Tk - j0);
        fa_load_tile<KIND>(ks, k + (long long)b * Tk * dk, j0, nc, dk);
        fa_load_tile<KIND>(vs, v + (long long)b * Tk * dv, j0, nc, dv);
        __syncthreads();
        fa_tile_grads<KIND>(ps, dss, qs, dos, ks, vs, Ds, Ls, nr, nc, i0, j0, off, causal, km,
                            dk, dv, scale);
        for (int j = 0; j < FA_COLS; ++j) {
            const int col = tid % 4 + 4 * j;
            float a = g[j];
            for (int cc = 0; cc < FA_T; ++cc) a += dss[ro][cc] * ks[cc][col];
            g[j] = a;
        }
        __syncthreads();
    }
    if (ro < nr) {
        const long long row = (long long)b * Tq + i0 + ro;
        for (int j = 0; j < FA_COLS; ++j) {
            const int col = tid % 4 + 4 * j;
            if (col < dk) nl_elem<KIND>::store(dq, row * dk + col, g[j]);
        }
    }
}

#define FA_FPROP_PARAMS(T)                                                                   \
    const T *q, const T *k, const T *v, T *out, float *lse, int H, int Tq, int Tk, int dk,   \
        int dv, long long sq, long long sk, long long sv, long long so, float scale,          \
        int causal, const T *key_mask, const int *row_ptr, const int *cols, int table_heads
#define FA_FPROP_ARGS                                                                        \
    (q, k, v, out, lse, H, Tq, Tk, dk, dv, sq, sk, sv, so, scale, causal, key_mask, row_ptr, \
     cols, table_heads)
NL_THREE_TYPES(nl_fa_fprop, FA_FPROP_PARAMS, FA_FPROP_ARGS)

#define FA_KV_PARAMS(T)                                                                      \
    const T *q, const T *k, const T *v, const T *out, const float *lse, const T *dout,       \
        T *dkey, T *dval, int H, int Tq, int Tk, int dk, int dv, float scale, int causal,     \
        const T *key_mask, const int *col_ptr, const int *rows, int table_heads
#define FA_KV_ARGS                                                                           \
    (q, k, v, out, lse, dout, dkey, dval, H, Tq, Tk, dk, dv, scale, causal, key_mask,        \
     col_ptr, rows, table_heads)
NL_THREE_TYPES(nl_fa_bprop_kv, FA_KV_PARAMS, FA_KV_ARGS)

#define FA_Q_PARAMS(T)                                                                       \
    const T *q, const T *k, const T *v, const T *out, const float *lse, const T *dout,       \
        T *dq, int H, int Tq, int Tk, int dk, int dv, float scale, int causal,                \
        const T *key_mask, const int *row_ptr, const int *cols, int table_heads
#define FA_Q_ARGS                                                                            \
    (q, k, v, out, lse, dout, dq, H, Tq, Tk, dk, dv, scale, causal, key_mask, row_ptr, cols, \
     table_heads)
NL_THREE_TYPES(nl_fa_bprop_q, FA_Q_PARAMS, FA_Q_ARGS)
