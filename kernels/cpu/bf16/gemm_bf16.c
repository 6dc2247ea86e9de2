/* bfloat16 x bfloat16 -> float32-accumulate GEMM (gemm_bf16.h), blocked like a BLAS GEMM:
 *
 *   the output is cut into tasks (a chunk of NL_NCHUNK columns x a run of blocks of NL_MC
 *   rows; threads take them dynamically and never wait for each other inside the product);
 *   a task, for each block of NL_KC k in order: packs its columns' op(B) rows into panels of
 *   NL_NR columns, then for each of its row blocks packs op(A) and runs the micro-kernel over
 *   every NL_MR x NL_NR block of C.
 *
 * The micro-kernel (gemm_bf16_avx512.h: VDPBF16PS; gemm_bf16_amx.h, with -DNL_BF16_AMX:
 * TDPBF16PS tiles) sums a block's k in a fixed order and adds it to C, so every output element
 * is summed in the same order whatever the number of threads and whichever thread ran it.
 * Products of two bf16 values are exact in float32; the sums round to float32 (and the
 * instructions treat denormal inputs and outputs as zero).
 */
#include <omp.h>

#include "../bf16_bits.h"
#include "../common.h"
#include "gemm_bf16.h"

#if defined(NL_BF16_AMX)
#include "gemm_bf16_amx.h"
#else
#include "gemm_bf16_avx512.h"
#endif

/* k per block (a multiple of 32: AMX tiles take 32), rows per task, columns per task */
#define NL_KC 512
#define NL_MC (NL_MR * 8)
#define NL_NCHUNK (NL_NR * 8)

int nl_gemm_bf16_built(void) { return NL_BUILT; }

#if NL_BUILT

static int64_t nl_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* C = beta * C over the whole M x N (K == 0: no product to add) */
static void nl_scale_c(float *C, int64_t M, int64_t N, int64_t ldc, float beta)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            C[m * ldc + n] = beta == 0.0f ? 0.0f : beta * C[m * ldc + n];
}

/* The epilogue of a bf16 output: the mr x nr block of C at c (row stride ldc), final, rounded
 * to nearest even into cb (row stride ldcb) while it is in L1. */
static void nl_narrow_block(const float *c, int64_t ldc, uint16_t *cb, int64_t ldcb,
                            int64_t mr, int64_t nr)
{
    for (int64_t r = 0; r < mr; r++)
        for (int64_t n = 0; n < nr; n++)
            cb[r * ldcb + n] = f32_to_bf16(c[r * ldc + n]);
}

/* One task: the C columns [n0, n0 + nc) of the rows [m0, m1), every k block in order; bp and
 * ap are the task's thread's packing buffers (NL_NCHUNK x NL_KC and NL_MC x NL_KC); with Cb,
 * each block of C is narrowed into it right after its last k block. */
static void nl_task(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb, int64_t m0,
                    int64_t m1, int64_t n0, int64_t nc, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t ldcb, int transA, int transB, float alpha, float beta,
                    uint16_t *bp, uint16_t *ap)
{
    for (int64_t k0 = 0; k0 < K; k0 += NL_KC) {
        const int64_t kc = K - k0 < NL_KC ? K - k0 : NL_KC;
        const int64_t kcp = nl_ceil_div(kc, NL_KALIGN) * NL_KALIGN;
        for (int64_t j = 0; j < nc; j += NL_NR)
            nl_pack_b(B, ldb, transB, k0, kc, kcp, n0 + j, nc - j < NL_NR ? nc - j : NL_NR,
                      NL_NR, bp + (j / NL_NR) * kcp * NL_NR);
        for (int64_t mb = m0; mb < m1; mb += NL_MC) {
            const int64_t mc = m1 - mb < NL_MC ? m1 - mb : NL_MC;
            for (int64_t i = 0; i < mc; i += NL_MR)
                nl_pack_a(A, lda, transA, mb + i, mc - i < NL_MR ? mc - i : NL_MR, k0, kc, kcp,
                          ap + i * kcp);
            for (int64_t j = 0; j < nc; j += NL_NR)
                for (int64_t i = 0; i < mc; i += NL_MR) {
                    const int64_t mr = mc - i < NL_MR ? mc - i : NL_MR;
                    const int64_t nr = nc - j < NL_NR ? nc - j : NL_NR;
                    float *c = C + (mb + i) * ldc + n0 + j;
                    nl_micro(kcp, ap + i * kcp, bp + (j / NL_NR) * kcp * NL_NR, c, ldc, mr, nr,
                             alpha, beta, k0 == 0);
                    if (Cb != NULL && k0 + kc >= K)
                        nl_narrow_block(c, ldc, Cb + (mb + i) * ldcb + n0 + j, ldcb, mr, nr);
                }
        }
    }
}

int nl_gemm_bf16(const uint16_t *A, const uint16_t *B, float *C, int64_t M, int64_t N,
                 int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int transA, int transB,
                 float alpha, float beta, int threads)
{
    return nl_gemm_bf16_to(A, B, C, NULL, M, N, K, lda, ldb, ldc, 0, transA, transB, alpha,
                           beta, threads, NULL);
}

/* The tasks: column chunks x runs of whole row blocks, about two per thread; no task shares
 * an output element with another, and none waits for another.  `threads`: those that take
 * part (at most nt, none without a task). */
typedef struct {
    int64_t runs, tasks, mblocks;
    int threads;
} nl_layout;

static nl_layout nl_plan(int64_t M, int64_t N, int nt)
{
    nl_layout l;
    const int64_t chunks = nl_ceil_div(N, NL_NCHUNK);
    l.mblocks = nl_ceil_div(M, NL_MC);
    l.runs = nl_ceil_div(2 * nt, chunks);
    l.runs = l.runs < 1 ? 1 : (l.runs > l.mblocks ? l.mblocks : l.runs);
    l.tasks = chunks * l.runs;
    l.threads = nt < l.tasks ? nt : (int)l.tasks;
    return l;
}

/* bf16 elements of one thread's packing buffers (B panels NL_NCHUNK x NL_KC, then A panels
 * NL_MC x NL_KC), a whole number of cache lines */
#define NL_THREAD_ELEMENTS (nl_ceil_div((int64_t)(NL_NCHUNK + NL_MC) * NL_KC, 32) * 32)

static int nl_threads_of(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

int64_t nl_gemm_bf16_work_bytes(int64_t M, int64_t N, int threads)
{
    if (M <= 0 || N <= 0)
        return 0;
    const nl_layout l = nl_plan(M, N, nl_threads_of(threads));
    return (int64_t)l.threads * NL_THREAD_ELEMENTS * (int64_t)sizeof(uint16_t);
}

int nl_gemm_bf16_to(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb, int64_t M,
                    int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldcb,
                    int transA, int transB, float alpha, float beta, int threads, void *work)
{
    if (work != NULL && ((uintptr_t)work & 63) != 0)
        return -4;
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0) {
        nl_scale_c(C, M, N, ldc, beta);
        if (Cb != NULL)
            nl_narrow_block(C, ldc, Cb, ldcb, M, N);
        return 0;
    }
    const nl_layout l = nl_plan(M, N, nl_threads_of(threads));
    int failed = 0;
    #pragma omp parallel num_threads(l.threads) reduction(| : failed)
    {
        uint16_t *bp = work != NULL
            ? (uint16_t *)work + omp_get_thread_num() * NL_THREAD_ELEMENTS
            : aligned_alloc(64, (size_t)NL_THREAD_ELEMENTS * sizeof(uint16_t));
        uint16_t *ap = bp == NULL ? NULL : bp + (int64_t)NL_NCHUNK * NL_KC;
        failed = bp == NULL;
        nl_thread_begin();
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < l.tasks; t++) {
            if (failed)
                continue;
            int64_t lo, hi;
            nl_split(l.mblocks, t % l.runs, l.runs, &lo, &hi);
            const int64_t n0 = (t / l.runs) * NL_NCHUNK;
            const int64_t m1 = hi * NL_MC < M ? hi * NL_MC : M;
            nl_task(A, B, C, Cb, lo * NL_MC, m1, n0, N - n0 < NL_NCHUNK ? N - n0 : NL_NCHUNK,
                    K, lda, ldb, ldc, ldcb, transA, transB, alpha, beta, bp, ap);
        }
        nl_thread_end();
        if (work == NULL)
            free(bp);
    }
    return failed ? -2 : 0;
}

double nl_bf16_peak_run(long iters, int threads, double *best)
{
    #pragma omp parallel num_threads(threads)
    {
        nl_thread_begin();
        const double start = omp_get_wtime();
        const float check = nl_peak_chains(iters);
        const double seconds = omp_get_wtime() - start;
        nl_thread_end();
        const double rate = (check == check ? 1.0 : 0.0) * NL_PEAK_FLOP_PER_ITER * (double)iters
                            / (seconds > 0 ? seconds : 1e-9);
        const int me = omp_get_thread_num();
        if (rate > best[me])
            best[me] = rate;
    }
    double total = 0.0;
    for (int t = 0; t < threads; t++)
        total += best[t];
    return total;
}

#else

int nl_gemm_bf16(const uint16_t *A, const uint16_t *B, float *C, int64_t M, int64_t N,
                 int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int transA, int transB,
                 float alpha, float beta, int threads)
{
    (void)A, (void)B, (void)C, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc;
    (void)transA, (void)transB, (void)alpha, (void)beta, (void)threads;
    return -1;
}

int nl_gemm_bf16_to(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb, int64_t M,
                    int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldcb,
                    int transA, int transB, float alpha, float beta, int threads, void *work)
{
    (void)A, (void)B, (void)C, (void)Cb, (void)M, (void)N, (void)K, (void)lda, (void)ldb;
    (void)ldc, (void)ldcb, (void)transA, (void)transB, (void)alpha, (void)beta, (void)threads;
    (void)work;
    return -1;
}

int64_t nl_gemm_bf16_work_bytes(int64_t M, int64_t N, int threads)
{
    (void)M, (void)N, (void)threads;
    return 0;
}

double nl_bf16_peak_run(long iters, int threads, double *best)
{
    (void)iters, (void)threads, (void)best;
    return 0.0;
}

#endif
