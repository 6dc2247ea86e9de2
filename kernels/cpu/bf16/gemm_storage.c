/* The bf16 storage path's GEMM (gemm_storage.h): float32 FMA arithmetic on bfloat16 or float32
 * operands, blocked like a BLAS GEMM:
 *
 *   the output is cut into tasks (a run of row blocks of NL_MC rows x a chunk of columns,
 *   about one task per thread, so each operand is packed about once); a task, for each block
 *   of NL_KC k in order, packs its columns of op(B) into panels of NL_NR columns and, for each
 *   of its row blocks, op(A) into panels of NL_MR rows, both widened to float32 on the way
 *   (exact), then runs the micro-kernel over every NL_MR x NL_NR block of C.
 *
 * The micro-kernel (AVX-512F: a 12 x 32 block of C in 24 registers, one FMA per (row, 16
 * columns) per k) sums a block's k in order and adds it to C; its epilogue applies alpha and
 * beta and, after the last k block, rounds the block to bfloat16 (nearest even, NaN to the
 * quiet NaN, the rule of bf16_bits.h) while it is still in registers.  Every output element
 * is summed in the same order whatever the number of threads and whichever thread ran it.
 * A single output row with op(B) row-major (a bias gradient) skips the packing: each thread
 * streams B over its own columns (nl_row_times_matrix).
 */
#include <omp.h>

#include "../bf16_bits.h"
#include "../common.h"
#include "gemm_storage.h"

/* k per block, rows per row block, columns per micro-kernel block, rows per micro block */
#define NL_KC 256
#define NL_MR 12
#define NL_NR 32
#define NL_MC (NL_MR * 8)
/* the most columns one task packs per k block (the B buffer of a thread: NL_KC x this) */
#define NL_MAX_CHUNK 4096

int64_t nl_gemm_storage_kc(void) { return NL_KC; }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

int nl_gemm_storage_built(void) { return 1; }

static int64_t nl_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static inline __mmask16 nl_mask(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* element i of X (bf16 bits where bf, else float32), as float32 */
static inline float nl_get(const void *X, int bf, int64_t i)
{
    return bf ? bf16_to_f32(((const uint16_t *)X)[i]) : ((const float *)X)[i];
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

/* dst[t * stride] = element i + t of X widened to float32, for t < n (a row of X written
 * down a column of a packed panel) */
static inline void nl_widen_strided(const void *X, int bf, int64_t i, int64_t n,
                                    float *restrict dst, int64_t stride)
{
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
        float lane[16];
        _mm512_storeu_ps(lane, nl_load16(X, bf, i + t, 0xFFFF));
        for (int u = 0; u < 16; u++)
            dst[(t + u) * stride] = lane[u];
    }
    for (; t < n; t++)
        dst[t * stride] = nl_get(X, bf, i + t);
}

/* B panels of columns [n0, n0 + nc) and k [k0, k0 + kc): panel p (NL_NR columns) at
 * bp + p * kc * NL_NR, bp[k * NL_NR + j] = op(B)(k0 + k, n0 + p * NL_NR + j); columns past nc
 * are zero. */
static void nl_pack_b(const void *B, int bf, int64_t ldb, int transB, int64_t k0, int64_t kc,
                      int64_t n0, int64_t nc, float *restrict bp)
{
    for (int64_t p = 0; p * NL_NR < nc; p++) {
        float *panel = bp + p * kc * NL_NR;
        const int64_t c0 = n0 + p * NL_NR, width = nc - p * NL_NR < NL_NR ? nc - p * NL_NR
                                                                         : NL_NR;
        if (!transB) {
            for (int64_t k = 0; k < kc; k++) {
                const int64_t row = (k0 + k) * ldb + c0;
                _mm512_store_ps(panel + k * NL_NR, nl_load16(B, bf, row, nl_mask(width)));
                _mm512_store_ps(panel + k * NL_NR + 16,
                                nl_load16(B, bf, row + 16, nl_mask(width - 16)));
            }
            continue;
        }
        for (int64_t k = 0; k < kc; k++)
            for (int64_t j = width; j < NL_NR; j++)
                panel[k * NL_NR + j] = 0.0f;
        for (int64_t j = 0; j < width; j++)
            nl_widen_strided(B, bf, (c0 + j) * ldb + k0, kc, panel + j, NL_NR);
    }
}

/* The A panel of rows [m0, m0 + mr) and k [k0, k0 + kc): ap[k * NL_MR + r] = op(A)(m0 + r,
 * k0 + k); rows past mr are zero. */
static void nl_pack_a(const void *A, int bf, int64_t lda, int transA, int64_t m0, int64_t mr,
                      int64_t k0, int64_t kc, float *restrict ap)
{
    if (transA) {
        const __mmask16 m = nl_mask(mr);
        for (int64_t k = 0; k < kc; k++)
            _mm512_mask_storeu_ps(ap + k * NL_MR, (__mmask16)0x0FFF,
                                  nl_load16(A, bf, (k0 + k) * lda + m0, m));
        return;
    }
    for (int64_t r = mr; r < NL_MR; r++)
        for (int64_t k = 0; k < kc; k++)
            ap[k * NL_MR + r] = 0.0f;
    for (int64_t r = 0; r < mr; r++)
        nl_widen_strided(A, bf, (m0 + r) * lda + k0, kc, ap + r, NL_MR);
}

/* Where a micro block's result goes: C (float32, or NULL) and Cb (bf16, or NULL) at the
 * block's first element, and what the epilogue does. */
typedef struct {
    float *c;
    uint16_t *cb;
    int64_t ldc, ldcb, mr, nr;
    float alpha, beta;
    int first, last;
} nl_block_out;

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

/* The operands and the output of one call, as every task reads them. */
typedef struct {
    const void *A, *B;
    float *C;
    uint16_t *Cb;
    int64_t M, N, K, lda, ldb, ldc, ldcb;
    int a_bf16, b_bf16, transA, transB;
    float alpha, beta;
} nl_gemm_call;

/* One task: C rows [m0, m1) x columns [n0, n0 + nc), every k block in order; bp, ap are the
 * thread's packing buffers (NL_KC x nc rounded up to NL_NR, and NL_MC x NL_KC). */
static void nl_task(const nl_gemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t nc,
                    float *bp, float *ap)
{
    for (int64_t k0 = 0; k0 < g->K; k0 += NL_KC) {
        const int64_t kc = g->K - k0 < NL_KC ? g->K - k0 : NL_KC;
        nl_pack_b(g->B, g->b_bf16, g->ldb, g->transB, k0, kc, n0, nc, bp);
        for (int64_t mb = m0; mb < m1; mb += NL_MC) {
            const int64_t mc = m1 - mb < NL_MC ? m1 - mb : NL_MC;
            for (int64_t i = 0; i < mc; i += NL_MR)
                nl_pack_a(g->A, g->a_bf16, g->lda, g->transA, mb + i,
                          mc - i < NL_MR ? mc - i : NL_MR, k0, kc, ap + i * kc);
            for (int64_t j = 0; j < nc; j += NL_NR)
                for (int64_t i = 0; i < mc; i += NL_MR) {
                    const int64_t row = mb + i, col = n0 + j;
                    nl_block_out o = {
                        g->C == NULL ? NULL : g->C + row * g->ldc + col,
                        g->Cb == NULL ? NULL : g->Cb + row * g->ldcb + col, g->ldc, g->ldcb,
                        mc - i < NL_MR ? mc - i : NL_MR, nc - j < NL_NR ? nc - j : NL_NR,
                        g->alpha, g->beta, k0 == 0, k0 + kc >= g->K};
                    nl_micro(kc, ap + i * kc, bp + (j / NL_NR) * kc * NL_NR, &o);
                }
        }
    }
}

/* K == 0: the result is beta times the old one */
static void nl_scale_result(const nl_gemm_call *g)
{
    for (int64_t m = 0; m < g->M; m++)
        for (int64_t n = 0; n < g->N; n++) {
            const float old = g->C != NULL ? g->C[m * g->ldc + n]
                                           : bf16_to_f32(g->Cb[m * g->ldcb + n]);
            const float v = g->beta == 0.0f ? 0.0f : g->beta * old;
            if (g->C != NULL)
                g->C[m * g->ldc + n] = v;
            if (g->Cb != NULL)
                g->Cb[m * g->ldcb + n] = f32_to_bf16(v);
        }
}

/* M == 1 with op(B) row-major (a bias gradient: ones @ dY, a row times a matrix): each thread
 * sums k in order over its own chunks of 16 columns, B streamed once, no packing. */
static void nl_row_times_matrix(const nl_gemm_call *g, int nt)
{
    const int64_t chunks = nl_ceil_div(g->N, 16);
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

int nl_gemm_storage(const void *A, int a_bf16, const void *B, int b_bf16, float *C,
                    uint16_t *Cb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t ldcb, int transA, int transB, float alpha, float beta,
                    int threads)
{
    if (C == NULL && (Cb == NULL || K > NL_KC))
        return -3;
    if (M <= 0 || N <= 0)
        return 0;
    const nl_gemm_call g = {A, B, C, Cb, M, N, K, lda, ldb, ldc, ldcb, a_bf16 != 0, b_bf16 != 0,
                       transA, transB, alpha, beta};
    if (K <= 0) {
        nl_scale_result(&g);
        return 0;
    }
    const int nt = threads > 0 ? threads : omp_get_max_threads();
    if (M == 1 && !transB) {
        nl_row_times_matrix(&g, nt < nl_ceil_div(N, 16) ? nt : (int)nl_ceil_div(N, 16));
        return 0;
    }
    /* tasks: runs of whole row blocks x chunks of whole panels, about one per thread (split
     * rows first: each run packs op(B) once per k block, each chunk op(A)); none shares an
     * output element with another */
    const int64_t mblocks = nl_ceil_div(M, NL_MC), panels = nl_ceil_div(N, NL_NR);
    const int64_t runs = mblocks < nt ? mblocks : nt;
    int64_t chunk = nl_ceil_div(panels, nl_ceil_div(nt, runs));
    if (chunk * NL_NR > NL_MAX_CHUNK)
        chunk = NL_MAX_CHUNK / NL_NR;
    const int64_t chunks = nl_ceil_div(panels, chunk), tasks = runs * chunks;
    int failed = 0;
    #pragma omp parallel num_threads(nt < tasks ? nt : (int)tasks) reduction(| : failed)
    {
        float *bp = aligned_alloc(64, (size_t)NL_KC * chunk * NL_NR * sizeof(float));
        float *ap = aligned_alloc(64, (size_t)NL_MC * NL_KC * sizeof(float));
        failed = bp == NULL || ap == NULL;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            if (failed)
                continue;
            int64_t lo, hi;
            nl_split(mblocks, t % runs, runs, &lo, &hi);
            const int64_t n0 = (t / runs) * chunk * NL_NR;
            nl_task(&g, lo * NL_MC, hi * NL_MC < M ? hi * NL_MC : M, n0,
                    N - n0 < chunk * NL_NR ? N - n0 : chunk * NL_NR, bp, ap);
        }
        free(bp);
        free(ap);
    }
    return failed ? -2 : 0;
}

#else

int nl_gemm_storage_built(void) { return 0; }

int nl_gemm_storage(const void *A, int a_bf16, const void *B, int b_bf16, float *C,
                    uint16_t *Cb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t ldcb, int transA, int transB, float alpha, float beta,
                    int threads)
{
    (void)A, (void)a_bf16, (void)B, (void)b_bf16, (void)C, (void)Cb, (void)M, (void)N, (void)K;
    (void)lda, (void)ldb, (void)ldc, (void)ldcb, (void)transA, (void)transB, (void)alpha;
    (void)beta, (void)threads;
    return -1;
}

#endif
