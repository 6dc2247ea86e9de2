/* The bf16 storage path's GEMM (gemm_storage.h): float32 FMA arithmetic on bfloat16 or float32
 * operands, blocked like a BLAS GEMM:
 *
 *   the output is cut into tasks (a run of row blocks of NL_MC rows x a chunk of columns,
 *   about one task per thread, so each operand is packed about once); a task, for each block
 *   of NL_KC k in order, packs its columns of op(B) into panels of NL_NR columns and, for each
 *   of its row blocks, op(A) into panels of NL_MR rows, both widened to float32 on the way
 *   (exact), then runs the micro-kernel over every NL_MR x NL_NR block of C.
 *
 * The micro-kernel (gemm_storage_avx512.h: a 12 x 32 block of C in 24 registers;
 * gemm_storage_avx2.h, AVX2 and FMA: a 6 x 16 block in 12) sums a block's k in order and adds
 * it to C; its epilogue applies alpha and beta and, after the last k block, rounds the block to
 * bfloat16 (nearest even, NaN to the quiet NaN, the rule of bf16_bits.h) while it is still in
 * registers.  Every output element is summed in the same order whatever the number of threads
 * and whichever thread ran it.  A single output row with op(B) row-major (a bias gradient)
 * skips the packing: each thread streams B over its own columns (nl_row_times_matrix).
 * The blocking, the threads' tasks and the packing loops are here; each ISA header gives the
 * micro-kernel, its epilogue, the row product and the packing's vector steps (nl_load_lanes,
 * nl_pack_b_row, nl_pack_a_transposed).
 */
#include <omp.h>

#include "../bf16_bits.h"
#include "../common.h"
#include "gemm_storage.h"

/* k per block (rows per row block NL_MC, columns per micro block NL_NR, rows per micro block
 * NL_MR and float32 lanes per vector NL_LANES are the micro-kernel header's) */
#define NL_KC 256
/* the most columns one task packs per k block (the B buffer of a thread: NL_KC x this) */
#define NL_MAX_CHUNK 4096

int64_t nl_gemm_storage_kc(void) { return NL_KC; }

static inline int64_t nl_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* element i of X (bf16 bits where bf, else float32), as float32 */
static inline float nl_get(const void *X, int bf, int64_t i)
{
    return bf ? bf16_to_f32(((const uint16_t *)X)[i]) : ((const float *)X)[i];
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

/* The operands and the output of one call, as every task reads them. */
typedef struct {
    const void *A, *B;
    float *C;
    uint16_t *Cb;
    int64_t M, N, K, lda, ldb, ldc, ldcb;
    int a_bf16, b_bf16, transA, transB;
    float alpha, beta;
} nl_gemm_call;

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "gemm_storage_avx512.h"
#elif defined(__AVX2__) && defined(__FMA__)
#include "gemm_storage_avx2.h"
#endif

#ifdef NL_ISA

int nl_gemm_storage_built(void) { return 1; }

const char *nl_gemm_storage_isa(void) { return NL_ISA; }

/* dst[t * stride] = element i + t of X widened to float32, for t < n (a row of X written
 * down a column of a packed panel) */
static inline void nl_widen_strided(const void *X, int bf, int64_t i, int64_t n,
                                    float *restrict dst, int64_t stride)
{
    int64_t t = 0;
    for (; t + NL_LANES <= n; t += NL_LANES) {
        float lane[NL_LANES] __attribute__((aligned(64)));
        nl_load_lanes(lane, X, bf, i + t);
        for (int u = 0; u < NL_LANES; u++)
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
            for (int64_t k = 0; k < kc; k++)
                nl_pack_b_row(panel + k * NL_NR, B, bf, (k0 + k) * ldb + c0, width);
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
 * k0 + k); rows past mr are zero (`rows`: op(A)'s row count). */
static void nl_pack_a(const void *A, int bf, int64_t lda, int transA, int64_t m0, int64_t mr,
                      int64_t k0, int64_t kc, float *restrict ap, int64_t rows)
{
    if (transA) {
        nl_pack_a_transposed(A, bf, lda, m0, mr, k0, kc, ap, rows);
        return;
    }
    for (int64_t r = mr; r < NL_MR; r++)
        for (int64_t k = 0; k < kc; k++)
            ap[k * NL_MR + r] = 0.0f;
    for (int64_t r = 0; r < mr; r++)
        nl_widen_strided(A, bf, (m0 + r) * lda + k0, kc, ap + r, NL_MR);
}

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
                          mc - i < NL_MR ? mc - i : NL_MR, k0, kc, ap + i * kc, g->M);
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

/* The tasks of a packed call: runs of whole micro-block rows (NL_MR) x chunks of `chunk`
 * whole panels, about one per thread (split rows first: each run packs op(B) once per k
 * block, each chunk op(A)); none shares an output element with another.  Runs of NL_MR rows,
 * not of NL_MC: 768 rows in blocks of 144 went 432 + 336 to two threads.  `threads`: those
 * that take part (at most nt, none without a task). */
typedef struct {
    int64_t runs, chunk, tasks, mpanels;
    int threads;
} nl_layout;

static nl_layout nl_plan(int64_t M, int64_t N, int nt)
{
    nl_layout l;
    l.mpanels = nl_ceil_div(M, NL_MR);
    const int64_t panels = nl_ceil_div(N, NL_NR);
    l.runs = l.mpanels < nt ? l.mpanels : nt;
    l.chunk = nl_ceil_div(panels, nl_ceil_div(nt, l.runs));
    if (l.chunk * NL_NR > NL_MAX_CHUNK)
        l.chunk = NL_MAX_CHUNK / NL_NR;
    l.tasks = l.runs * nl_ceil_div(panels, l.chunk);
    l.threads = nt < l.tasks ? nt : (int)l.tasks;
    return l;
}

/* floats of one thread's packing buffers (B panels, then A panels), a whole number of cache
 * lines */
static int64_t nl_thread_floats(const nl_layout *l)
{
    return nl_ceil_div((int64_t)NL_KC * l->chunk * NL_NR + (int64_t)NL_MC * NL_KC, 16) * 16;
}

static int nl_threads_of(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

int64_t nl_gemm_storage_work_bytes(int64_t M, int64_t N, int threads)
{
    if (M <= 0 || N <= 0)
        return 0;
    const nl_layout l = nl_plan(M, N, nl_threads_of(threads));
    return (int64_t)l.threads * nl_thread_floats(&l) * (int64_t)sizeof(float);
}

int nl_gemm_storage(const void *A, int a_bf16, const void *B, int b_bf16, float *C,
                    uint16_t *Cb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t ldcb, int transA, int transB, float alpha, float beta,
                    int threads, void *work)
{
    if (C == NULL && (Cb == NULL || K > NL_KC))
        return -3;
    if (work != NULL && ((uintptr_t)work & 63) != 0)
        return -4;
    if (M <= 0 || N <= 0)
        return 0;
    const nl_gemm_call g = {A, B, C, Cb, M, N, K, lda, ldb, ldc, ldcb, a_bf16 != 0, b_bf16 != 0,
                       transA, transB, alpha, beta};
    if (K <= 0) {
        nl_scale_result(&g);
        return 0;
    }
    const int nt = nl_threads_of(threads);
    if (M == 1 && !transB) {
        const int64_t columns = nl_ceil_div(N, NL_LANES);
        nl_row_times_matrix(&g, nt < columns ? nt : (int)columns);
        return 0;
    }
    const nl_layout l = nl_plan(M, N, nt);
    const int64_t per_thread = nl_thread_floats(&l);
    int failed = 0;
    #pragma omp parallel num_threads(l.threads) reduction(| : failed)
    {
        float *bp = work != NULL ? (float *)work + omp_get_thread_num() * per_thread
                                 : aligned_alloc(64, (size_t)per_thread * sizeof(float));
        float *ap = bp == NULL ? NULL : bp + (int64_t)NL_KC * l.chunk * NL_NR;
        failed = bp == NULL;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < l.tasks; t++) {
            if (failed)
                continue;
            int64_t lo, hi;
            nl_split(l.mpanels, t % l.runs, l.runs, &lo, &hi);
            const int64_t n0 = (t / l.runs) * l.chunk * NL_NR;
            nl_task(&g, lo * NL_MR, hi * NL_MR < M ? hi * NL_MR : M, n0,
                    N - n0 < l.chunk * NL_NR ? N - n0 : l.chunk * NL_NR, bp, ap);
        }
        if (work == NULL)
            free(bp);
    }
    return failed ? -2 : 0;
}

#else

int nl_gemm_storage_built(void) { return 0; }

const char *nl_gemm_storage_isa(void) { return "none"; }

int nl_gemm_storage(const void *A, int a_bf16, const void *B, int b_bf16, float *C,
                    uint16_t *Cb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t ldcb, int transA, int transB, float alpha, float beta,
                    int threads, void *work)
{
    (void)A, (void)a_bf16, (void)B, (void)b_bf16, (void)C, (void)Cb, (void)M, (void)N, (void)K;
    (void)lda, (void)ldb, (void)ldc, (void)ldcb, (void)transA, (void)transB, (void)alpha;
    (void)beta, (void)threads, (void)work;
    return -1;
}

int64_t nl_gemm_storage_work_bytes(int64_t M, int64_t N, int threads)
{
    (void)M, (void)N, (void)threads;
    return 0;
}

#endif
