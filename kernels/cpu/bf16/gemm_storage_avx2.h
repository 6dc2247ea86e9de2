/* The AVX2 pieces of the storage path's GEMM (gemm_storage.c includes this file where
 * -march=native enables AVX2 and FMA but not AVX-512): a 6 x 16 micro block of C in 12
 * registers (two 8-lane vectors a row; with the two B vectors and one broadcast, 15 of the 16
 * ymm registers), loads that widen bf16 on the way, the epilogue's rounding to bf16 in
 * registers.  AVX2 has no masked 16-bit loads or stores: a part of a vector (the edges of a
 * product) goes through an 8-float array on the stack.  Not a cffi header. */
#include <immintrin.h>

#define NL_MR 6
#define NL_NR 16
#define NL_MC (NL_MR * 24)
#define NL_LANES 8
#define NL_ISA "AVX2"

/* 8 consecutive elements of X from element i, as float32 */
static inline __m256 nl_load8(const void *X, int bf, int64_t i)
{
    if (bf) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)X + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)X + i);
}

/* min(n, 8) consecutive elements of X from element i (lanes past n are zero), as float32 */
static inline __m256 nl_load_part(const void *X, int bf, int64_t i, int64_t n)
{
    if (n >= 8)
        return nl_load8(X, bf, i);
    float lane[8] __attribute__((aligned(32))) = {0};
    for (int64_t t = 0; t < n; t++)
        lane[t] = nl_get(X, bf, i + t);
    return _mm256_load_ps(lane);
}

/* 8 float32 -> 8 bf16 bit patterns, rounded as f32_to_bf16 rounds (NaN -> 0x7FC0) */
static inline __m128i nl_round8(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0),
                           _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    /* each 128-bit lane packs its 4 values twice; 64-bit words 0 and 2 hold the 8 in order */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}

/* lane[0 .. 8) = elements i .. i + 7 of X as float32 (nl_widen_strided's vector step) */
static inline void nl_load_lanes(float *lane, const void *X, int bf, int64_t i)
{
    _mm256_store_ps(lane, nl_load8(X, bf, i));
}

/* row[0 .. NL_NR) = op(B)'s width (<= NL_NR) elements from element at of B, zeros past them */
static inline void nl_pack_b_row(float *row, const void *B, int bf, int64_t at, int64_t width)
{
    _mm256_store_ps(row, nl_load_part(B, bf, at, width));
    _mm256_store_ps(row + 8, width > 8 ? nl_load_part(B, bf, at + 8, width - 8)
                                       : _mm256_setzero_ps());
}

/* The A panel of a transposed A (see nl_pack_a): op(A)(m0 + r, k0 + k) = A[(k0 + k) * lda +
 * m0 + r], mr <= NL_MR of them contiguous per k; read 8 at a time where op(A)'s `rows` reach. */
static void nl_pack_a_transposed(const void *A, int bf, int64_t lda, int64_t m0, int64_t mr,
                                 int64_t k0, int64_t kc, float *restrict ap, int64_t rows)
{
    /* row k of the panel is op(A)'s 6 elements of k, stored as 8 floats: the 2 past the
     * row land on row k + 1's place, written again next (AVX2's masked store runs slowly
     * on AMD cores); the last row goes through a stack array, to stay inside the panel */
    for (int64_t k = 0; k < kc; k++) {
        const int64_t at = (k0 + k) * lda + m0;
        const __m256 v = mr == NL_MR && m0 + 8 <= rows ? nl_load8(A, bf, at)
                                                       : nl_load_part(A, bf, at, mr);
        if (k + 1 < kc) {
            _mm256_storeu_ps(ap + k * NL_MR, v);
            continue;
        }
        float lane[8] __attribute__((aligned(32)));
        _mm256_store_ps(lane, v);
        for (int r = 0; r < NL_MR; r++)
            ap[k * NL_MR + r] = lane[r];
    }
}

/* The epilogue of one row half (8 columns) of a micro block: v = alpha * sum, plus beta * old
 * (first k block) or the partial sum in C (later blocks); stored to C, and to Cb rounded after
 * the last k block.  Only min(nr - 8h, 8) columns are read or written. */
static inline void nl_store(const nl_block_out *o, int64_t r, int64_t h, __m256 acc)
{
    const int64_t n = o->nr - 8 * h;
    float *p = o->c == NULL ? NULL : o->c + r * o->ldc + 8 * h;
    uint16_t *q = o->cb == NULL ? NULL : o->cb + r * o->ldcb + 8 * h;
    __m256 v = _mm256_mul_ps(_mm256_set1_ps(o->alpha), acc);
    if (!o->first) {
        v = _mm256_add_ps(v, nl_load_part(p, 0, 0, n));
    } else if (o->beta != 0.0f) {
        const __m256 old = p != NULL ? nl_load_part(p, 0, 0, n) : nl_load_part(q, 1, 0, n);
        v = _mm256_fmadd_ps(_mm256_set1_ps(o->beta), old, v);
    }
    const int round = q != NULL && o->last;
    if (n >= 8) {
        if (p != NULL)
            _mm256_storeu_ps(p, v);
        if (round)
            _mm_storeu_si128((__m128i *)q, nl_round8(v));
        return;
    }
    float lane[8] __attribute__((aligned(32)));
    uint16_t bits[8] __attribute__((aligned(16)));
    _mm256_store_ps(lane, v);
    if (round)
        _mm_store_si128((__m128i *)bits, nl_round8(v));
    for (int64_t t = 0; t < n; t++) {
        if (p != NULL)
            p[t] = lane[t];
        if (round)
            q[t] = bits[t];
    }
}

/* tile[r * NL_NR + j] = sum over k < kc of ap[k * NL_MR + r] * bp[k * NL_NR + j], k in order:
 * the 12 sums in named registers (GCC spills half of an array of them), kept out of line so
 * the epilogue's registers do not crowd them */
static __attribute__((noinline)) void nl_micro_sum(int64_t kc, const float *restrict ap,
                                                   const float *restrict bp,
                                                   float *restrict tile)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; k++, ap += NL_MR, bp += NL_NR) {
        const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
        __m256 a = _mm256_broadcast_ss(ap);
        c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(ap + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(ap + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(ap + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    _mm256_store_ps(tile, c00), _mm256_store_ps(tile + 8, c01);
    _mm256_store_ps(tile + 16, c10), _mm256_store_ps(tile + 24, c11);
    _mm256_store_ps(tile + 32, c20), _mm256_store_ps(tile + 40, c21);
    _mm256_store_ps(tile + 48, c30), _mm256_store_ps(tile + 56, c31);
    _mm256_store_ps(tile + 64, c40), _mm256_store_ps(tile + 72, c41);
    _mm256_store_ps(tile + 80, c50), _mm256_store_ps(tile + 88, c51);
}

/* one NL_MR x NL_NR block: the packed A panel times the packed B panel over kc, then the
 * epilogue for its mr x nr part */
static void nl_micro(int64_t kc, const float *restrict ap, const float *restrict bp,
                     const nl_block_out *o)
{
    float tile[NL_MR * NL_NR] __attribute__((aligned(32)));
    nl_micro_sum(kc, ap, bp, tile);
    for (int64_t r = 0; r < o->mr; r++) {
        nl_store(o, r, 0, _mm256_load_ps(tile + r * NL_NR));
        if (o->nr > 8)
            nl_store(o, r, 1, _mm256_load_ps(tile + r * NL_NR + 8));
    }
}

/* M == 1 with op(B) row-major (a bias gradient: ones @ dY, a row times a matrix): each thread
 * sums k in order over its own chunks of 8 columns, B streamed once, no packing. */
static void nl_row_times_matrix(const nl_gemm_call *g, int nt)
{
    const int64_t chunks = nl_ceil_div(g->N, NL_LANES);
    #pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t j = 0; j < chunks; j++) {
        const int64_t n = g->N - 8 * j;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < g->K; k++) {
            const float a = nl_get(g->A, g->a_bf16, g->transA ? k * g->lda : k);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(a),
                                  nl_load_part(g->B, g->b_bf16, k * g->ldb + 8 * j, n), acc);
        }
        const nl_block_out o = {g->C == NULL ? NULL : g->C + 8 * j,
                                g->Cb == NULL ? NULL : g->Cb + 8 * j, g->ldc, g->ldcb, 1, n,
                                g->alpha, g->beta, 1, 1};
        nl_store(&o, 0, 0, acc);
    }
}
