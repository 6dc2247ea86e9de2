/* The AVX-512 pieces of the storage path's GEMM (gemm_storage.c, which includes this file
 * where -march=native enables AVX-512 F, BW and VL): a 12 x 32 micro block of C in 24
 * registers, 16-lane masked loads that widen bf16 on the way, the epilogue's rounding to
 * bf16 in registers.  Not a cffi header. */
#include <immintrin.h>

#define NL_MR 12
#define NL_NR 32
#define NL_MC (NL_MR * 8)
#define NL_LANES 16
#define NL_ISA "AVX-512"

static inline __mmask16 nl_mask(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* up to 16 consecutive elements of X from element i (lanes past mask are zero), as float32 */
static inline __m512 nl_load16(const void *X, int bf, int64_t i, __mmask16 m)
{
    if (bf) {
        const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)X + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)X + i);
}

/* 16 float32 -> 16 bf16 bit patterns, rounded as f32_to_bf16 rounds (NaN -> 0x7FC0) */
static inline __m256i nl_round16(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                              _mm512_set1_epi32(0x7FC0));
    return _mm512_cvtepi32_epi16(r);
}

/* lane[0 .. 16) = elements i .. i + 15 of X as float32 (nl_widen_strided's vector step) */
static inline void nl_load_lanes(float *lane, const void *X, int bf, int64_t i)
{
    _mm512_storeu_ps(lane, nl_load16(X, bf, i, 0xFFFF));
}

/* row[0 .. NL_NR) = op(B)'s width (<= NL_NR) elements from element at of B, zeros past them */
static inline void nl_pack_b_row(float *row, const void *B, int bf, int64_t at, int64_t width)
{
    _mm512_store_ps(row, nl_load16(B, bf, at, nl_mask(width)));
    _mm512_store_ps(row + 16, nl_load16(B, bf, at + 16, nl_mask(width - 16)));
}

/* The A panel of a transposed A (see nl_pack_a): op(A)(m0 + r, k0 + k) = A[(k0 + k) * lda +
 * m0 + r], mr <= NL_MR of them contiguous per k. */
static void nl_pack_a_transposed(const void *A, int bf, int64_t lda, int64_t m0, int64_t mr,
                                 int64_t k0, int64_t kc, float *restrict ap, int64_t rows)
{
    (void)rows;
    const __mmask16 m = nl_mask(mr);
    for (int64_t k = 0; k < kc; k++)
        _mm512_mask_storeu_ps(ap + k * NL_MR, (__mmask16)0x0FFF,
                              nl_load16(A, bf, (k0 + k) * lda + m0, m));
}

/* The epilogue of one row half (16 columns, mask m) of a micro block: v = alpha * sum, plus
 * beta * old (first k block) or the partial sum in C (later blocks); stored to C, and to Cb
 * rounded after the last k block. */
static inline void nl_store(const nl_block_out *o, int64_t r, int64_t h, __m512 acc)
{
    const __mmask16 m = nl_mask(o->nr - 16 * h);
    float *p = o->c == NULL ? NULL : o->c + r * o->ldc + 16 * h;
    uint16_t *q = o->cb == NULL ? NULL : o->cb + r * o->ldcb + 16 * h;
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(o->alpha), acc);
    if (!o->first) {
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, p));
    } else if (o->beta != 0.0f) {
        const __m512 old = p != NULL ? _mm512_maskz_loadu_ps(m, p) : nl_load16(q, 1, 0, m);
        v = _mm512_fmadd_ps(_mm512_set1_ps(o->beta), old, v);
    }
    if (p != NULL)
        _mm512_mask_storeu_ps(p, m, v);
    if (q != NULL && o->last)
        _mm256_mask_storeu_epi16(q, m, nl_round16(v));
}

/* one NL_MR x NL_NR block: the packed A panel times the packed B panel over kc, then the
 * epilogue for its mr x nr part */
static void nl_micro(int64_t kc, const float *restrict ap, const float *restrict bp,
                     const nl_block_out *o)
{
    __m512 acc[NL_MR][2];
    #pragma GCC unroll 12
    for (int r = 0; r < NL_MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(bp + k * NL_NR);
        const __m512 b1 = _mm512_load_ps(bp + k * NL_NR + 16);
        #pragma GCC unroll 12
        for (int r = 0; r < NL_MR; r++) {
            const __m512 a = _mm512_set1_ps(ap[k * NL_MR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    #pragma GCC unroll 12
    for (int r = 0; r < NL_MR; r++) {
        if (r >= o->mr)
            break;
        nl_store(o, r, 0, acc[r][0]);
        if (o->nr > 16)
            nl_store(o, r, 1, acc[r][1]);
    }
}

/* M == 1 with op(B) row-major (a bias gradient: ones @ dY, a row times a matrix): each thread
 * sums k in order over its own chunks of 16 columns, B streamed once, no packing. */
static void nl_row_times_matrix(const nl_gemm_call *g, int nt)
{
    const int64_t chunks = nl_ceil_div(g->N, NL_LANES);
    #pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t j = 0; j < chunks; j++) {
        const __mmask16 m = nl_mask(g->N - 16 * j);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t k = 0; k < g->K; k++) {
            const float a = nl_get(g->A, g->a_bf16, g->transA ? k * g->lda : k);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(a), nl_load16(g->B, g->b_bf16,
                                                               k * g->ldb + 16 * j, m), acc);
        }
        const nl_block_out o = {g->C == NULL ? NULL : g->C + 16 * j,
                                g->Cb == NULL ? NULL : g->Cb + 16 * j, g->ldc, g->ldcb, 1,
                                g->N - 16 * j, g->alpha, g->beta, 1, 1};
        nl_store(&o, 0, 0, acc);
    }
}
