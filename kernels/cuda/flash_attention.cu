// Fused attention (the contract's Backend.attention / attention_bprop) on head-major slices:
// q (B, Tq, dk), k (B, Tk, dk), v (B, Tk, dv), out (B, Tq, dv), lse (B, Tq) float32; B = N * H.
// Tiles of BT queries x BT keys, head widths dk, dv <= BD, one entry point per (BT, BD) shape:
//   t32d64:  BT 32, BD 64  (head widths up to 64)
//   t16d128: BT 16, BD 128 (head widths up to 128)
// Static shared memory per block (float32 tiles, rows padded by one float; ptxas -v): forward
// 2 * BT * (BD + 1) + BT * (BT + 1) + 3 * BT floats = 21.2 KB (t32d64) / 17.8 KB (t16d128),
// backward at most 4 * BT * (BD + 1) + 2 * BT * (BT + 1) + 2 * BT floats = 42.0 KB / 35.3 KB:
// under the 48 KB static limit of sm_80 and sm_90, so no dynamic shared memory opt-in.  Heads of
// 128 at 32-token tiles would need 18688 floats (74.8 KB) backward, hence the 16-token tiles.
// The tiles a query block visits come from the tables of backends/cpu_attention.py:visit_tables
// at BT-token tiles (row_ptr / cols per query block, col_ptr / rows per key block; table_heads
// 1 or H).  Masks as the CPU kernels: causal (key j <= i + Tk - Tq), key_mask (N, Tk; NULL:
// none), unvisited tiles, and a block layout finer than the tiles (FaLayout) inside a tile.
// Dropout (keep < 1) on the probabilities from the per-example Philox stream of
// numpy_attention.AttentionDropout, bit for bit: the backward pass regenerates each keep
// decision, nothing is stored.  The forward pass of float16 / bfloat16 runs its two
// products on tensor cores (mma.sync m16n8k16, float32 accumulation); everything else is
// float32 on the CUDA cores.  Online softmax in base 2.  Compiled and emulated, not run on a GPU.
//
//   nl_fa_fprop_*:    grid (Tq/BT, B): a query block's output accumulates in registers while
//                     the key blocks stream through shared memory.
//   nl_fa_bprop_kv_*: grid (Tk/BT, B): dK, dV of a key block over the query blocks visiting it.
//   nl_fa_bprop_q_*:  grid (Tq/BT, B): dQ of a query block over its key blocks.
// Each output element is one sequential sum in a fixed order: no atomics, deterministic.
#include "neonlite_common.cuh"
#include "philox.cuh"

#define FA_THREADS 128
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

template <int KIND>
using fa_t = typename nl_elem<KIND>::T;

// The dropout stream of slice b = n * H + h: probability (i, j) is element h*Tq*Tk + i*Tk + j
// of global example first + n, whose uniform is word e % 4 of philox(counter = (g lo, g hi,
// step, stream), key = seed), g = (first + n) * ceil(H*Tq*Tk / 4) + e / 4 (backends/philox.py:
// example_uniforms).  A thread walking consecutive keys reuses each counter's four words.
struct FaDropout {
    float keep, inv;
    unsigned key[2], step, stream, words[4];
    unsigned long long base, cached;
    long long first_elem, Tk;
};

__device__ __forceinline__ FaDropout fa_dropout(float keep, unsigned seed_lo, unsigned seed_hi,
                                                unsigned step, unsigned stream, long long first,
                                                int b, int H, int Tq, int Tk) {
    const long long per = (long long)H * Tq * Tk;
    FaDropout d;
    d.keep = keep;
    d.inv = 1.0f / keep;
    d.key[0] = seed_lo;
    d.key[1] = seed_hi;
    d.step = step;
    d.stream = stream;
    d.base = (unsigned long long)(first + b / H) * (unsigned long long)((per + 3) / 4);
    d.cached = ~0ull;
    d.first_elem = (long long)(b % H) * Tq * Tk;
    d.Tk = Tk;
    return d;
}

// The dropout factor of query row i, key j (0 or 1 / keep; 1 with keep >= 1).
__device__ __forceinline__ float fa_drop(FaDropout& d, int i, int j) {
    if (d.keep >= 1.0f) return 1.0f;
    const long long e = d.first_elem + (long long)i * d.Tk + j;
    const unsigned long long g = d.base + (unsigned long long)(e / 4);
    if (g != d.cached) {
        unsigned c[4] = {(unsigned)g, (unsigned)(g >> 32), d.step, d.stream};
        nl_philox4x32_10(c, d.key);
        for (int w = 0; w < 4; ++w) d.words[w] = c[w];
        d.cached = g;
    }
    const float u = (float)(d.words[e % 4] >> 8) * 5.9604644775390625e-08f;
    return u < d.keep ? d.inv : 0.0f;
}

// rows [r0, r0 + n) of a (rows, d) slice at `src` into tile[BT][BD + 1] (zeros past n, d).
template <int KIND, int BT, int BD>
__device__ __forceinline__ void fa_load_tile(float (*tile)[BD + 1], const fa_t<KIND>* src,
                                             long long r0, int n, int d) {
    for (int e = threadIdx.x; e < BT * BD; e += FA_THREADS) {
        int row = e / BD, col = e % BD;
        tile[row][col] = (row < n && col < d) ? nl_elem<KIND>::load(src, (r0 + row) * d + col)
                                              : 0.0f;
    }
}

// A block layout finer than the tiles (lay NULL: the visit tables say it all): the slice's
// head plane of the 0/1 bytes (Hl, ceil(Tq / bq), ceil(Tk / bk)); key j of query i is visible
// only where its block is 1.
struct FaLayout {
    const unsigned char* lay;
    int bq, bk, nkb;
};

__device__ __forceinline__ FaLayout fa_layout(const unsigned char* layout, int bq, int bk,
                                              int Tq, int Tk, int plane) {
    FaLayout L;
    L.bq = bq > 0 ? bq : 1;
    L.bk = bk > 0 ? bk : 1;
    L.nkb = (Tk + L.bk - 1) / L.bk;
    L.lay = layout ? layout + (long long)plane * ((Tq + L.bq - 1) / L.bq) * L.nkb : nullptr;
    return L;
}

template <int KIND>
__device__ __forceinline__ bool fa_visible(int i, int j, int nr, int nc, int i0, int j0, int off,
                                           int causal, const fa_t<KIND>* km,
                                           const FaLayout& L) {
    return i < nr && j < nc && (!causal || j0 + j <= i0 + i + off) &&
           (km == nullptr || nl_elem<KIND>::load(km, j0 + j) != 0.0f) &&
           (L.lay == nullptr || L.lay[(long long)((i0 + i) / L.bq) * L.nkb + (j0 + j) / L.bk]);
}

// Row threadIdx.x (< BT) of the score tile ss (base-2 logits, -inf where hidden) folded into
// the running max ms and sum ls (of the probabilities before dropout); ss becomes the
// dropped-out probabilities and as the factor that rescales the row's earlier output.
template <int BT>
__device__ __forceinline__ void fa_online_softmax(float (*ss)[BT + 1], float* ms, float* ls,
                                                  float* as, FaDropout& drop, int i0, int j0) {
    const int i = threadIdx.x;
    if (i < BT) {
        float top = ms[i];
        for (int c = 0; c < BT; ++c) top = fmaxf(top, ss[i][c]);
        const float safe = top == -INFINITY ? 0.0f : top, alpha = exp2f(ms[i] - safe);
        float sum = 0.0f;
        for (int c = 0; c < BT; ++c) {
            const float p = exp2f(ss[i][c] - safe);
            ss[i][c] = p == 0.0f ? 0.0f : p * fa_drop(drop, i0 + i, j0 + c);
            sum += p;
        }
        ls[i] = ls[i] * alpha + sum;
        ms[i] = top;
        as[i] = alpha;
    }
    __syncthreads();
}

// lse of the query block's rows (natural log; -inf for a row with no visible key).
template <int BT>
__device__ __forceinline__ void fa_store_lse(float* lse, const float* ms, const float* ls,
                                             long long row0, int nr) {
    const int i = threadIdx.x;
    if (i < nr) lse[row0 + i] = ls[i] > 0.0f ? (ms[i] + log2f(ls[i])) * FA_LN2 : -INFINITY;
}

#define FA_FPROP_DECL(KIND)                                                                       \
    const fa_t<KIND>*q, const fa_t<KIND>*k, const fa_t<KIND>*v, fa_t<KIND>*out, float *lse,       \
        int H, int Tq, int Tk, int dk, int dv, long long sq, long long sk, long long sv,          \
        long long so, float scale, int causal, const fa_t<KIND>*key_mask, const int *row_ptr,     \
        const int *cols, int table_heads

template <int KIND, int BT, int BD>
__device__ void fa_fprop_simt(FA_FPROP_DECL(KIND), FaDropout drop, FaLayout lay) {
    constexpr int TPR = FA_THREADS / BT, COLS = BD / TPR;  // threads per row, columns each
    __shared__ float qs[BT][BD + 1], kv[BT][BD + 1], ss[BT][BT + 1];
    __shared__ float ms[BT], ls[BT], as[BT];
    const int b = blockIdx.y, r = blockIdx.x, nqb = (Tq + BT - 1) / BT, tid = threadIdx.x;
    const int i0 = r * BT, nr = min(BT, Tq - i0), off = Tk - Tq;
    const int t = table_heads == 1 ? 0 : b % H, ro = tid / TPR;
    const float sc2 = scale * FA_LOG2E;
    const fa_t<KIND>* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_tile<KIND, BT, BD>(qs, q + b * sq, i0, nr, dk);
    if (tid < BT) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float acc[COLS];
    for (int j = 0; j < COLS; ++j) acc[j] = 0.0f;
    __syncthreads();
    for (int e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; ++e) {
        const int j0 = cols[e] * BT, nc = min(BT, Tk - j0);
        fa_load_tile<KIND, BT, BD>(kv, k + b * sk, j0, nc, dk);
        __syncthreads();
        for (int x = tid; x < BT * BT; x += FA_THREADS) {
            int i = x / BT, c = x % BT;
            float s = 0.0f;
            for (int d = 0; d < dk; ++d) s += qs[i][d] * kv[c][d];
            ss[i][c] = fa_visible<KIND>(i, c, nr, nc, i0, j0, off, causal, km, lay) ? s * sc2
                                                                                : -INFINITY;
        }
        __syncthreads();
        fa_online_softmax<BT>(ss, ms, ls, as, drop, i0, j0);
        fa_load_tile<KIND, BT, BD>(kv, v + b * sv, j0, nc, dv);
        __syncthreads();
        for (int j = 0; j < COLS; ++j) {
            const int col = tid % TPR + TPR * j;
            float a = acc[j] * as[ro];
            for (int c = 0; c < BT; ++c) a += ss[ro][c] * kv[c][col];
            acc[j] = a;
        }
        __syncthreads();
    }
    if (ro < nr) {
        const float inv = ls[ro] > 0.0f ? 1.0f / ls[ro] : 0.0f;
        for (int j = 0; j < COLS; ++j) {
            const int col = tid % TPR + TPR * j;
            if (col < dv)
                nl_elem<KIND>::store(out + b * so, (long long)(i0 + ro) * dv + col, acc[j] * inv);
        }
    }
    fa_store_lse<BT>(lse, ms, ls, (long long)b * Tq + i0, nr);
}

// Two 16-bit values (x low, y high) of storage KIND (1 float16, 2 bfloat16) in one register.
template <int KIND>
__device__ __forceinline__ unsigned fa_pack(float x, float y) {
    const unsigned lo = KIND == 1 ? nl_f32_to_f16(x) : nl_f32_to_bf16(x);
    const unsigned hi = KIND == 1 ? nl_f32_to_f16(y) : nl_f32_to_bf16(y);
    return (lo & 0xFFFFu) | (hi << 16);
}

// The A fragment (rows r0 + g, r0 + g + 8; columns c, c + 1, c + 8, c + 9) of a shared tile.
template <int KIND, int W>
__device__ __forceinline__ void fa_a_fragment(unsigned* a, float (*m)[W], int r0, int g, int c) {
    a[0] = fa_pack<KIND>(m[r0 + g][c], m[r0 + g][c + 1]);
    a[1] = fa_pack<KIND>(m[r0 + g + 8][c], m[r0 + g + 8][c + 1]);
    a[2] = fa_pack<KIND>(m[r0 + g][c + 8], m[r0 + g][c + 9]);
    a[3] = fa_pack<KIND>(m[r0 + g + 8][c + 8], m[r0 + g + 8][c + 9]);
}

// The forward pass with both products on tensor cores (float16 / bfloat16 inputs, float32
// accumulation; P rounded to the storage type for the second).  The block's m16n8 tiles are
// numbered (16-row group, 8-column group) row-major and dealt to the four warps in runs:
// SPW score tiles (a warp past the last tile recomputes it and discards it, so every thread
// reaches every mma.sync) and OPW output tiles per warp, accumulators in the fragment layout.
template <int KIND, int BT, int BD>
__device__ void fa_fprop_tc(FA_FPROP_DECL(KIND), FaDropout drop, FaLayout lay) {
    constexpr int SN = BT / 8, ON = BD / 8, NS = BT / 16 * SN, NO = BT / 16 * ON;
    constexpr int SPW = (NS + 3) / 4, OPW = NO / 4;
    static_assert(NO % 4 == 0 && ON % OPW == 0, "output tiles must split evenly over warps");
    __shared__ float qs[BT][BD + 1], kv[BT][BD + 1], ss[BT][BT + 1];
    __shared__ float ms[BT], ls[BT], as[BT];
    const int b = blockIdx.y, r = blockIdx.x, nqb = (Tq + BT - 1) / BT, tid = threadIdx.x;
    const int i0 = r * BT, nr = min(BT, Tq - i0), off = Tk - Tq;
    const int t = table_heads == 1 ? 0 : b % H;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int orow = 16 * (warp * OPW / ON), ocol = 8 * (warp * OPW % ON);
    const int ksteps = (dk + 15) / 16;
    const float sc2 = scale * FA_LOG2E;
    const fa_t<KIND>* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_tile<KIND, BT, BD>(qs, q + b * sq, i0, nr, dk);
    if (tid < BT) { ms[tid] = -INFINITY; ls[tid] = 0.0f; }
    float o[OPW][4];
    for (int n = 0; n < OPW; ++n)
        for (int x = 0; x < 4; ++x) o[n][x] = 0.0f;
    __syncthreads();
    for (int e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; ++e) {
        const int j0 = cols[e] * BT, nc = min(BT, Tk - j0);
        fa_load_tile<KIND, BT, BD>(kv, k + b * sk, j0, nc, dk);
        __syncthreads();
        float s[SPW][4];
        for (int n = 0; n < SPW; ++n)
            for (int x = 0; x < 4; ++x) s[n][x] = 0.0f;
        for (int ks = 0; ks < ksteps; ++ks) {
            const int c = 16 * ks + 2 * tq;
            for (int n = 0; n < SPW; ++n) {
                const int tile = min(warp * SPW + n, NS - 1), key = 8 * (tile % SN) + g;
                unsigned a[4];
                fa_a_fragment<KIND, BD + 1>(a, qs, 16 * (tile / SN), g, c);
                const unsigned bf[2] = {fa_pack<KIND>(kv[key][c], kv[key][c + 1]),
                                        fa_pack<KIND>(kv[key][c + 8], kv[key][c + 9])};
                nl_mma_m16n8k16<KIND>(s[n], a, bf);
            }
        }
        for (int n = 0; n < SPW; ++n) {
            const int tile = warp * SPW + n;
            if (tile >= NS) continue;
            for (int x = 0; x < 4; ++x) {
                const int i = 16 * (tile / SN) + g + (x >= 2 ? 8 : 0);
                const int c = 8 * (tile % SN) + 2 * tq + (x & 1);
                ss[i][c] = fa_visible<KIND>(i, c, nr, nc, i0, j0, off, causal, km, lay)
                               ? s[n][x] * sc2 : -INFINITY;
            }
        }
        __syncthreads();
        fa_online_softmax<BT>(ss, ms, ls, as, drop, i0, j0);
        fa_load_tile<KIND, BT, BD>(kv, v + b * sv, j0, nc, dv);
        __syncthreads();
        for (int n = 0; n < OPW; ++n)
            for (int x = 0; x < 4; ++x) o[n][x] *= as[orow + g + (x >= 2 ? 8 : 0)];
        for (int ks = 0; ks < BT / 16; ++ks) {
            const int c = 16 * ks + 2 * tq;
            unsigned a[4];
            fa_a_fragment<KIND, BT + 1>(a, ss, orow, g, c);
            for (int n = 0; n < OPW; ++n) {
                const int col = ocol + 8 * n + g;
                const unsigned bf[2] = {fa_pack<KIND>(kv[c][col], kv[c + 1][col]),
                                        fa_pack<KIND>(kv[c + 8][col], kv[c + 9][col])};
                nl_mma_m16n8k16<KIND>(o[n], a, bf);
            }
        }
        __syncthreads();
    }
    for (int n = 0; n < OPW; ++n)
        for (int x = 0; x < 4; ++x) {
            const int i = orow + g + (x >= 2 ? 8 : 0), col = ocol + 8 * n + 2 * tq + (x & 1);
            if (i < nr && col < dv)
                nl_elem<KIND>::store(out + b * so, (long long)(i0 + i) * dv + col,
                                     ls[i] > 0.0f ? o[n][x] / ls[i] : 0.0f);
        }
    fa_store_lse<BT>(lse, ms, ls, (long long)b * Tq + i0, nr);
}

// Rows [i0, i0 + nr) of dO and q into shared tiles, with D = rowsum(dO * O) and lse in base 2.
template <int KIND, int BT, int BD>
__device__ __forceinline__ void fa_load_queries(
    float (*qs)[BD + 1], float (*dos)[BD + 1], float* Ds, float* Ls, const fa_t<KIND>* q,
    const fa_t<KIND>* out, const fa_t<KIND>* dout, const float* lse, int b, int Tq, int i0,
    int nr, int dk, int dv) {
    fa_load_tile<KIND, BT, BD>(qs, q + (long long)b * Tq * dk, i0, nr, dk);
    fa_load_tile<KIND, BT, BD>(dos, dout + (long long)b * Tq * dv, i0, nr, dv);
    __syncthreads();
    if (threadIdx.x < BT) {
        const int i = threadIdx.x;
        float D = 0.0f, L = INFINITY;  // rows past the end or with no visible key: P = 0
        if (i < nr) {
            const long long row = (long long)b * Tq + i0 + i;
            for (int d = 0; d < dv; ++d) D += dos[i][d] * nl_elem<KIND>::load(out, row * dv + d);
            if (lse[row] != -INFINITY) L = lse[row] * FA_LOG2E;
        }
        Ds[i] = D;
        Ls[i] = L;
    }
    __syncthreads();
}

// Z * P and dS = scale * P * (Z * dO v^T - D) of one tile into ps / dss (Z the dropout
// factors).  Thread tid takes row tid / TPR, BT / TPR consecutive keys (so the dropout words
// of a counter serve up to four of them).
template <int KIND, int BT, int BD>
__device__ __forceinline__ void fa_tile_grads(
    float (*ps)[BT + 1], float (*dss)[BT + 1], float (*qs)[BD + 1], float (*dos)[BD + 1],
    float (*ks)[BD + 1], float (*vs)[BD + 1], const float* Ds, const float* Ls, int nr,
    int nc, int i0, int j0, int off, int causal, const fa_t<KIND>* km, int dk, int dv,
    float scale, FaDropout& drop, const FaLayout& lay) {
    constexpr int TPR = FA_THREADS / BT, SPAN = BT / TPR;
    const float sc2 = scale * FA_LOG2E;
    const int i = threadIdx.x / TPR;
    for (int cc = 0; cc < SPAN; ++cc) {
        const int c = threadIdx.x % TPR * SPAN + cc;
        float p = 0.0f, dp = 0.0f, z = 1.0f;
        if (fa_visible<KIND>(i, c, nr, nc, i0, j0, off, causal, km, lay)) {
            float s = 0.0f;
            for (int d = 0; d < dk; ++d) s += qs[i][d] * ks[c][d];
            p = exp2f(s * sc2 - Ls[i]);
            for (int d = 0; d < dv; ++d) dp += dos[i][d] * vs[c][d];
            if (p != 0.0f) z = fa_drop(drop, i0 + i, j0 + c);
        }
        ps[i][c] = p * z;
        dss[i][c] = scale * p * (dp * z - Ds[i]);
    }
    __syncthreads();
}

#define FA_KV_DECL(KIND)                                                                          \
    const fa_t<KIND>*q, const fa_t<KIND>*k, const fa_t<KIND>*v, const fa_t<KIND>*out,             \
        const float *lse, const fa_t<KIND>*dout, fa_t<KIND>*dkey, fa_t<KIND>*dval, int H,         \
        int Tq, int Tk, int dk, int dv, float scale, int causal, const fa_t<KIND>*key_mask,       \
        const int *col_ptr, const int *rows, int table_heads

template <int KIND, int BT, int BD>
__device__ void fa_bprop_kv(FA_KV_DECL(KIND), FaDropout drop, FaLayout lay) {
    constexpr int TPR = FA_THREADS / BT, COLS = BD / TPR;
    __shared__ float ks[BT][BD + 1], vs[BT][BD + 1], qs[BT][BD + 1];
    __shared__ float dos[BT][BD + 1], ps[BT][BT + 1], dss[BT][BT + 1];
    __shared__ float Ds[BT], Ls[BT];
    const int b = blockIdx.y, c = blockIdx.x, nkb = (Tk + BT - 1) / BT, tid = threadIdx.x;
    const int j0 = c * BT, nc = min(BT, Tk - j0), off = Tk - Tq, ro = tid / TPR;
    const int t = table_heads == 1 ? 0 : b % H;
    const fa_t<KIND>* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_tile<KIND, BT, BD>(ks, k + (long long)b * Tk * dk, j0, nc, dk);
    fa_load_tile<KIND, BT, BD>(vs, v + (long long)b * Tk * dv, j0, nc, dv);
    float gk[COLS], gv[COLS];
    for (int j = 0; j < COLS; ++j) gk[j] = gv[j] = 0.0f;
    for (int e = col_ptr[t * nkb + c]; e < col_ptr[t * nkb + c + 1]; ++e) {
        const int i0 = rows[e] * BT, nr = min(BT, Tq - i0);
        fa_load_queries<KIND, BT, BD>(qs, dos, Ds, Ls, q, out, dout, lse, b, Tq, i0, nr, dk,
                                      dv);
        fa_tile_grads<KIND, BT, BD>(ps, dss, qs, dos, ks, vs, Ds, Ls, nr, nc, i0, j0, off,
                                    causal, km, dk, dv, scale, drop, lay);
        for (int j = 0; j < COLS; ++j) {
            const int col = tid % TPR + TPR * j;
            float a = gv[j], g = gk[j];
            for (int i = 0; i < BT; ++i) {
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
        for (int j = 0; j < COLS; ++j) {
            const int col = tid % TPR + TPR * j;
            if (col < dk) nl_elem<KIND>::store(dkey, row * dk + col, gk[j]);
            if (col < dv) nl_elem<KIND>::store(dval, row * dv + col, gv[j]);
        }
    }
}

#define FA_Q_DECL(KIND)                                                                           \
    const fa_t<KIND>*q, const fa_t<KIND>*k, const fa_t<KIND>*v, const fa_t<KIND>*out,             \
        const float *lse, const fa_t<KIND>*dout, fa_t<KIND>*dq, int H, int Tq, int Tk,            \
        int dk, int dv, float scale, int causal, const fa_t<KIND>*key_mask,                       \
        const int *row_ptr, const int *cols, int table_heads

template <int KIND, int BT, int BD>
__device__ void fa_bprop_q(FA_Q_DECL(KIND), FaDropout drop, FaLayout lay) {
    constexpr int TPR = FA_THREADS / BT, COLS = BD / TPR;
    __shared__ float ks[BT][BD + 1], vs[BT][BD + 1], qs[BT][BD + 1];
    __shared__ float dos[BT][BD + 1], ps[BT][BT + 1], dss[BT][BT + 1];
    __shared__ float Ds[BT], Ls[BT];
    const int b = blockIdx.y, r = blockIdx.x, nqb = (Tq + BT - 1) / BT, tid = threadIdx.x;
    const int i0 = r * BT, nr = min(BT, Tq - i0), off = Tk - Tq, ro = tid / TPR;
    const int t = table_heads == 1 ? 0 : b % H;
    const fa_t<KIND>* km = key_mask ? key_mask + (long long)(b / H) * Tk : nullptr;
    fa_load_queries<KIND, BT, BD>(qs, dos, Ds, Ls, q, out, dout, lse, b, Tq, i0, nr, dk, dv);
    float g[COLS];
    for (int j = 0; j < COLS; ++j) g[j] = 0.0f;
    for (int e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; ++e) {
        const int j0 = cols[e] * BT, nc = min(BT, Tk - j0);
        fa_load_tile<KIND, BT, BD>(ks, k + (long long)b * Tk * dk, j0, nc, dk);
        fa_load_tile<KIND, BT, BD>(vs, v + (long long)b * Tk * dv, j0, nc, dv);
        __syncthreads();
        fa_tile_grads<KIND, BT, BD>(ps, dss, qs, dos, ks, vs, Ds, Ls, nr, nc, i0, j0, off,
                                    causal, km, dk, dv, scale, drop, lay);
        for (int j = 0; j < COLS; ++j) {
            const int col = tid % TPR + TPR * j;
            float a = g[j];
            for (int cc = 0; cc < BT; ++cc) a += dss[ro][cc] * ks[cc][col];
            g[j] = a;
        }
        __syncthreads();
    }
    if (ro < nr) {
        const long long row = (long long)b * Tq + i0 + ro;
        for (int j = 0; j < COLS; ++j) {
            const int col = tid % TPR + TPR * j;
            if (col < dk) nl_elem<KIND>::store(dq, row * dk + col, g[j]);
        }
    }
}

// Entry points nl_fa_{fprop,bprop_kv,bprop_q}_t{BT}d{BD}_{f32,f16,bf16}; each ends with the
// dropout arguments (keep; keep >= 1: none) of numpy_attention.AttentionDropout and the block
// layout of FaLayout (layout NULL when its blocks are whole tiles).
#define FA_TAIL_PARAMS                                                                            \
    float keep, unsigned seed_lo, unsigned seed_hi, unsigned step, unsigned stream,               \
        long long first, const unsigned char *layout, int bq, int bk
#define FA_TAIL                                                                                   \
    fa_dropout(keep, seed_lo, seed_hi, step, stream, first, blockIdx.y, H, Tq, Tk),               \
        fa_layout(layout, bq, bk, Tq, Tk, table_heads == 1 ? 0 : blockIdx.y % H)
#define FA_ENTRY(NAME, DECL, KIND, T, BT, BD, BODY)                                               \
    extern "C" __global__ void NAME##_t##BT##d##BD##_##T(DECL(KIND), FA_TAIL_PARAMS)              \
        BODY(KIND, BT, BD)
#define FA_FPROP_BODY(KIND, BT, BD)                                                               \
    {                                                                                             \
        if constexpr (KIND == 0)                                                                  \
            fa_fprop_simt<KIND, BT, BD>(q, k, v, out, lse, H, Tq, Tk, dk, dv, sq, sk, sv, so,     \
                                        scale, causal, key_mask, row_ptr, cols, table_heads,      \
                                        FA_TAIL);                                                 \
        else                                                                                      \
            fa_fprop_tc<KIND, BT, BD>(q, k, v, out, lse, H, Tq, Tk, dk, dv, sq, sk, sv, so,       \
                                      scale, causal, key_mask, row_ptr, cols, table_heads,        \
                                      FA_TAIL);                                                   \
    }
#define FA_KV_BODY(KIND, BT, BD)                                                                  \
    {                                                                                             \
        fa_bprop_kv<KIND, BT, BD>(q, k, v, out, lse, dout, dkey, dval, H, Tq, Tk, dk, dv, scale,  \
                                  causal, key_mask, col_ptr, rows, table_heads, FA_TAIL);         \
    }
#define FA_Q_BODY(KIND, BT, BD)                                                                   \
    {                                                                                             \
        fa_bprop_q<KIND, BT, BD>(q, k, v, out, lse, dout, dq, H, Tq, Tk, dk, dv, scale, causal,   \
                                 key_mask, row_ptr, cols, table_heads, FA_TAIL);                  \
    }
#define FA_SHAPE(BT, BD)                                                                          \
    FA_ENTRY(nl_fa_fprop, FA_FPROP_DECL, 0, f32, BT, BD, FA_FPROP_BODY)                            \
    FA_ENTRY(nl_fa_fprop, FA_FPROP_DECL, 1, f16, BT, BD, FA_FPROP_BODY)                            \
    FA_ENTRY(nl_fa_fprop, FA_FPROP_DECL, 2, bf16, BT, BD, FA_FPROP_BODY)                           \
    FA_ENTRY(nl_fa_bprop_kv, FA_KV_DECL, 0, f32, BT, BD, FA_KV_BODY)                               \
    FA_ENTRY(nl_fa_bprop_kv, FA_KV_DECL, 1, f16, BT, BD, FA_KV_BODY)                               \
    FA_ENTRY(nl_fa_bprop_kv, FA_KV_DECL, 2, bf16, BT, BD, FA_KV_BODY)                              \
    FA_ENTRY(nl_fa_bprop_q, FA_Q_DECL, 0, f32, BT, BD, FA_Q_BODY)                                  \
    FA_ENTRY(nl_fa_bprop_q, FA_Q_DECL, 1, f16, BT, BD, FA_Q_BODY)                                  \
    FA_ENTRY(nl_fa_bprop_q, FA_Q_DECL, 2, bf16, BT, BD, FA_Q_BODY)

FA_SHAPE(32, 64)
FA_SHAPE(16, 128)
