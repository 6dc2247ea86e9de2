/* The bf16 storage path's GEMM on MKL's packed GEMM (see gemm_packed.h).
 *
 * MKL's sgemm is faster than this project's own float32 GEMM on the storage path's shapes,
 * but it takes float32 operands and gives a float32 result: widening both operands into
 * float32 copies and narrowing the result afterwards costs three passes over memory (the
 * result's is the largest, about a quarter of a transformer projection's time).  Here every
 * conversion happens on a piece small enough to stay in the core's cache between its
 * conversion and its use:
 *
 *   phase 1 (chunks shared out among the threads): a chunk of the packed operand widened
 *   into the thread's work area and packed by cblas_sgemm_pack;
 *   phase 2 (strips shared out among the threads, after every chunk is packed): a strip of
 *   the other operand widened into the work area, then for every chunk one
 *   cblas_sgemm_compute of the strip by the chunk into a tile of C, a bf16 result rounded
 *   from the float32 tile right after its call.
 *
 * A thread's work area holds the widened chunk in phase 1, then the widened strip and one
 * float32 tile. */
#include <omp.h>

#include "../common.h"
#include "../bf16_rows.h"
#include "gemm_packed.h"

/* bytes of a widened strip: well inside a core's L2 with the tile beside it */
#define NL_STRIP_BYTES (1 << 20)
/* strips a product is cut into at least, where they are not smaller than 64 (MKL's compute
 * runs a thin strip slowly): the threads' shares stay even (a product of 3 strips on 2
 * threads would leave one idle a third of the time) while the strips depend on the shape
 * alone, not on the thread count.  Four, not eight: each strip is one more cblas_sgemm_compute
 * per chunk, which packs its unpacked operand again; nanoGPT's products (768 rows, or a
 * weight gradient's 128 to 512 columns) ran 4.6% faster in all with strips of a quarter than
 * of an eighth, each product as fast or faster (2-core Emerald Rapids). */
#define NL_STRIPS 4

enum { NL_A_MATRIX = 161 };

int64_t nl_gemm_packed_strip(int64_t K, int64_t length)
{
    int64_t most = NL_STRIP_BYTES / (4 * (K > 0 ? K : 1));
    most = (most < 32 ? 32 : most > 256 ? 256 : most) & ~(int64_t)15;
    const int64_t part = ((length + NL_STRIPS - 1) / NL_STRIPS + 15) & ~(int64_t)15;
    const int64_t s = part < 64 ? 64 : part;
    return s > most ? most : s;
}

int64_t nl_gemm_packed_part(int64_t K, int64_t kparts)
{
    if (kparts <= 1)
        return K;
    return ((K + kparts - 1) / kparts + 15) & ~(int64_t)15;
}

int64_t nl_gemm_packed_work(int64_t K, int64_t strip, int64_t chunk)
{
    const int64_t pack = chunk * K;
    const int64_t use = strip * K + strip * chunk;
    return pack > use ? pack : use;
}

static inline int64_t nl_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* dst[r * ldd + c] = src[r * lds + c] widened, for r < rows, c < cols */
static void widen_block(const uint16_t *src, int64_t lds, int64_t rows, int64_t cols,
                        float *restrict dst, int64_t ldd)
{
    for (int64_t r = 0; r < rows; r++)
        bf16_widen(src + r * lds, dst + r * ldd, cols);
}

/* dst[r * ldd + c] = src[r * lds + c] rounded to nearest even, for r < rows, c < cols */
static void narrow_block(const float *src, int64_t lds, int64_t rows, int64_t cols,
                         uint16_t *restrict dst, int64_t ldd)
{
    for (int64_t r = 0; r < rows; r++)
        bf16_narrow(src + r * lds, dst + r * ldd, cols);
}

/* One call's arguments, with "P" the packed operand and "S" the strip operand. */
struct packed_gemm {
    const uint16_t *A, *B;
    float *C;
    uint16_t *Cb;
    int64_t M, N, K, lda, ldb, ldc, strip, chunk, packed_stride, work_stride, kparts, kpart;
    int transA, transB, pack_b;
    float alpha, beta;
    float *packed, *work;
    nl_gemm_pack pk;
    nl_gemm_compute mm;
};

/* The length of part p of the inner dimension (parts of kpart, the last what is left). */
static inline int64_t part_length(const struct packed_gemm *g, int64_t p)
{
    return nl_min64(g->kpart, g->K - p * g->kpart);
}

/* Widen piece `job` of the packed operand (chunk job / kparts, part job % kparts of the inner
 * dimension) into tmp and pack it. */
static void pack_piece(const struct packed_gemm *g, int64_t job, float *tmp)
{
    const int64_t j = job / g->kparts, k0 = (job % g->kparts) * g->kpart;
    const int64_t p0 = j * g->chunk, kn = part_length(g, job % g->kparts);
    float *dest = g->packed + job * g->packed_stride;
    if (g->pack_b) {
        const int64_t nc = nl_min64(g->chunk, g->N - p0);
        if (g->transB) {
            widen_block(g->B + p0 * g->ldb + k0, g->ldb, nc, kn, tmp, kn);
            g->pk(NL_ROW_MAJOR, NL_B_MATRIX, NL_TRANS, (int)g->M, (int)nc, (int)kn, g->alpha,
                  tmp, (int)kn, dest);
        } else {
            widen_block(g->B + k0 * g->ldb + p0, g->ldb, kn, nc, tmp, nc);
            g->pk(NL_ROW_MAJOR, NL_B_MATRIX, NL_NO_TRANS, (int)g->M, (int)nc, (int)kn,
                  g->alpha, tmp, (int)nc, dest);
        }
    } else {
        const int64_t mc = nl_min64(g->chunk, g->M - p0);
        if (g->transA) {
            widen_block(g->A + k0 * g->lda + p0, g->lda, kn, mc, tmp, mc);
            g->pk(NL_ROW_MAJOR, NL_A_MATRIX, NL_TRANS, (int)mc, (int)g->N, (int)kn, g->alpha,
                  tmp, (int)mc, dest);
        } else {
            widen_block(g->A + p0 * g->lda + k0, g->lda, mc, kn, tmp, kn);
            g->pk(NL_ROW_MAJOR, NL_A_MATRIX, NL_NO_TRANS, (int)mc, (int)g->N, (int)kn,
                  g->alpha, tmp, (int)kn, dest);
        }
    }
}

/* Widen strip i of the strip operand into s; its transpose flag, leading dimension and the
 * step between its consecutive k (1, or the leading dimension). */
static void widen_strip(const struct packed_gemm *g, int64_t i, float *s, int *trans,
                        int64_t *ld, int64_t *kstep)
{
    const int64_t s0 = i * g->strip, K = g->K;
    if (g->pack_b) {
        const int64_t mb = nl_min64(g->strip, g->M - s0);
        if (g->transA) {
            widen_block(g->A + s0, g->lda, K, mb, s, mb);
            *trans = NL_TRANS, *ld = mb, *kstep = mb;
        } else {
            widen_block(g->A + s0 * g->lda, g->lda, mb, K, s, K);
            *trans = NL_NO_TRANS, *ld = K, *kstep = 1;
        }
    } else {
        const int64_t nb = nl_min64(g->strip, g->N - s0);
        if (g->transB) {
            widen_block(g->B + s0 * g->ldb, g->ldb, nb, K, s, K);
            *trans = NL_TRANS, *ld = K, *kstep = 1;
        } else {
            widen_block(g->B + s0, g->ldb, K, nb, s, nb);
            *trans = NL_NO_TRANS, *ld = nb, *kstep = nb;
        }
    }
}

/* The tile of strip i (widened in s) and chunk j: rows r0.. (rows), columns c0.. (cols), the
 * sum over the inner dimension's parts in order (the first scaled by beta's C, the next
 * added). */
static void tile(const struct packed_gemm *g, int64_t i, int64_t j, const float *s, int trans,
                 int64_t ld, int64_t kstep, float *t)
{
    const int64_t s0 = i * g->strip, p0 = j * g->chunk;
    int64_t r0, c0, rows, cols;
    if (g->pack_b) {
        r0 = s0, rows = nl_min64(g->strip, g->M - s0);
        c0 = p0, cols = nl_min64(g->chunk, g->N - p0);
    } else {
        r0 = p0, rows = nl_min64(g->chunk, g->M - p0);
        c0 = s0, cols = nl_min64(g->strip, g->N - s0);
    }
    float *out = g->C ? g->C + r0 * g->ldc + c0 : t;
    const int64_t ldo = g->C ? g->ldc : cols;
    if (!g->C && g->beta != 0.0f)
        widen_block(g->Cb + r0 * g->ldc + c0, g->ldc, rows, cols, t, cols);
    for (int64_t p = 0; p < g->kparts; p++) {
        const float *packed = g->packed + (j * g->kparts + p) * g->packed_stride;
        const float *part = s + p * g->kpart * kstep;
        const float beta = p == 0 ? g->beta : 1.0f;
        const int kn = (int)part_length(g, p);
        if (g->pack_b)
            g->mm(NL_ROW_MAJOR, trans, NL_PACKED, (int)rows, (int)cols, kn, part, (int)ld,
                  packed, (int)cols, beta, out, (int)ldo);
        else
            g->mm(NL_ROW_MAJOR, NL_PACKED, trans, (int)rows, (int)cols, kn, packed, kn, part,
                  (int)ld, beta, out, (int)ldo);
    }
    if (!g->C)
        narrow_block(t, cols, rows, cols, g->Cb + r0 * g->ldc + c0, g->ldc);
}

int nl_gemm_packed(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb, int64_t M,
                   int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int transA,
                   int transB, float alpha, float beta, int pack_b, float *packed,
                   int64_t packed_stride, float *work, int64_t work_stride, int64_t strip,
                   int64_t chunk, int64_t kparts, int64_t pack, int64_t compute, int threads)
{
    if ((C == NULL) == (Cb == NULL))
        return -1;
    struct packed_gemm g = {
        .A = A, .B = B, .C = C, .Cb = Cb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb,
        .ldc = ldc, .strip = strip, .chunk = chunk, .packed_stride = packed_stride,
        .work_stride = work_stride, .kpart = nl_gemm_packed_part(K, kparts),
        .transA = transA, .transB = transB, .pack_b = pack_b, .alpha = alpha, .beta = beta,
        .packed = packed, .work = work, .pk = (nl_gemm_pack)(intptr_t)pack,
        .mm = (nl_gemm_compute)(intptr_t)compute};
    g.kparts = g.kpart > 0 && K > g.kpart ? (K + g.kpart - 1) / g.kpart : 1;
    const int64_t packed_len = pack_b ? N : M, strip_len = pack_b ? M : N;
    const int64_t chunks = (packed_len + chunk - 1) / chunk, pieces = chunks * g.kparts;
    const int64_t strips = (strip_len + strip - 1) / strip;
    const int most = threads > 0 ? threads : omp_get_max_threads();
    const int64_t busiest = pieces > strips ? pieces : strips;
    const int nth = (int)(most < busiest ? most : busiest);
    #pragma omp parallel num_threads(nth)
    {
        float *area = work + (int64_t)omp_get_thread_num() * work_stride;
        float *tile_area = area + strip * K;
        #pragma omp for schedule(static, 1)
        for (int64_t job = 0; job < pieces; job++)
            pack_piece(&g, job, area);
        #pragma omp for schedule(static, 1)
        for (int64_t i = 0; i < strips; i++) {
            int trans;
            int64_t ld, kstep;
            widen_strip(&g, i, area, &trans, &ld, &kstep);
            for (int64_t j = 0; j < chunks; j++)
                tile(&g, i, j, area, trans, ld, kstep, tile_area);
        }
    }
    return 0;
}

int nl_gemm_packed_run(const nl_packed_product *p, float alpha, float beta, float *packed,
                       float *work, int threads)
{
    typedef int (*set_threads_fn)(int);
    const set_threads_fn set = (set_threads_fn)(intptr_t)p->set_threads;
    const int previous = set ? set(1) : 0;
    const int status = nl_gemm_packed(p->A, p->B, p->C, p->Cb, p->M, p->N, p->K, p->lda,
                                      p->ldb, p->ldc, p->transA, p->transB, alpha, beta,
                                      p->pack_b, packed, p->packed_stride, work,
                                      p->work_stride, p->strip, p->chunk, p->kparts, p->pack,
                                      p->compute, threads);
    if (set)
        set(previous);
    return status;
}
