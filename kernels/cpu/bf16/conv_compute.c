/* Convolution passes on bf16 operands with bf16 arithmetic (conv_compute.h): conv.c's tiled
 * passes, with a tile's patches gathered as bf16 bits (no widening) and its product on a bf16
 * GEMM (the address of nl_gemm_bf16_to, one thread per tile), accumulating in float32.  The
 * filter and e's rows are read as they are (bf16); only outputs are staged in float32 and
 * rounded once. */
#include <omp.h>

#include "../common.h"
#include "../conv_bf16_rows.h"
#include "../conv_update_blocks.h"
#include "conv_compute.h"

/* patches gathered as bf16 bits, copied as they are */
typedef uint16_t conv_patch_t;
typedef struct {
    const uint16_t *xb;
} conv_source;

static inline void conv_patch_load(const conv_source *src, int64_t at, uint16_t *dst, int64_t n)
{
    memcpy(dst, src->xb + at, (size_t)n * sizeof(uint16_t));
}

#include "../conv_patches.h"

typedef int (*nl_gemm_bf16_fn)(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb,
                               int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                               int64_t ldc, int64_t ldcb, int transA, int transB, float alpha,
                               float beta, int threads, void *work);

static int64_t lines(int64_t bytes) { return (bytes + 63) / 64 * 64; }

/* A thread's slice of the work, in bytes: its patches (tile * Q rows of R*S*C bf16), its
 * float32 staging (tile * Q rows of K or of R*S*C, then an image of H*W*C), then the GEMM's
 * packing buffers; each part on a cache line. */
typedef struct {
    int64_t patches, staging, image, gemm, slice;
} conv_slice;

static conv_slice slice_of(const conv_geom *g, int64_t tile, int64_t gemm_work)
{
    const int64_t rows = tile * g->Q, row_len = g->R * g->S * g->C;
    conv_slice s;
    s.patches = lines(rows * row_len * (int64_t)sizeof(uint16_t));
    s.staging = lines(rows * (row_len > g->K ? row_len : g->K) * (int64_t)sizeof(float));
    s.image = lines(g->H * g->W * g->C * (int64_t)sizeof(float));
    s.gemm = lines(gemm_work);
    s.slice = s.patches + s.staging + s.image + s.gemm;
    return s;
}

/* the widened bias (K floats) at the head of the work */
static int64_t head_of(const conv_geom *g) { return lines(g->K * (int64_t)sizeof(float)); }

int64_t conv_compute_work_bytes(const conv_geom *g, int64_t nwork, int64_t tile,
                                int64_t gemm_work)
{
    return head_of(g) + nwork * slice_of(g, tile, gemm_work).slice;
}

/* thread me's parts of the work */
typedef struct {
    uint16_t *patches;
    float *staging, *image;
    void *gemm;
} conv_parts;

static conv_parts parts_of(void *work, const conv_geom *g, const conv_slice *s, int64_t me)
{
    uint8_t *base = (uint8_t *)work + head_of(g) + me * s->slice;
    conv_parts p = {(uint16_t *)base, (float *)(base + s->patches),
                    (float *)(base + s->patches + s->staging),
                    base + s->patches + s->staging + s->image};
    return p;
}

int conv_fprop_compute(const uint16_t *x, const uint16_t *f, uint16_t *o, const conv_geom *g,
                        int64_t gemm, void *work, int64_t gemm_work, int64_t nwork,
                        int64_t tile, const uint16_t *bias, int relu)
{
    const nl_gemm_bf16_fn mm = (nl_gemm_bf16_fn)(intptr_t)gemm;
    const int64_t Q = g->Q, K = g->K, row_len = g->R * g->S * g->C, rows = g->N * g->P;
    const int64_t ntiles = (rows + tile - 1) / tile;
    const conv_slice s = slice_of(g, tile, gemm_work);
    float *wide_bias = NULL;
    if (bias) {
        wide_bias = (float *)work;
        conv_widen(NULL, bias, 0, wide_bias, K);
    }
    int status = 0;
#pragma omp parallel for num_threads(nwork) schedule(dynamic, 1) reduction(min : status)
    for (int64_t t = 0; t < ntiles; t++) {
        const conv_parts w = parts_of(work, g, &s, omp_get_thread_num());
        const int64_t r0 = t * tile, r1 = r0 + tile < rows ? r0 + tile : rows;
        gather_rows(&(conv_source){x}, w.patches, g, r0, r1);
        const int done = mm(w.patches, f, w.staging, NULL, (r1 - r0) * Q, K, row_len, row_len,
                            K, K, 0, 0, 0, 1.0f, 0.0f, 1, w.gemm);
        status = done < status ? done : status;
        nl_bias_relu(w.staging, (r1 - r0) * Q, K, wide_bias, relu);
        conv_narrow(w.staging, o + r0 * Q * K, (r1 - r0) * Q * K, 0);
    }
    return status;
}

int conv_update_compute(const uint16_t *x, const uint16_t *e, uint16_t *df,
                         const conv_geom *g, int64_t gemm, void *work, int64_t gemm_work,
                         int64_t nwork, int64_t tile, float *partials, float beta)
{
    const nl_gemm_bf16_fn mm = (nl_gemm_bf16_fn)(intptr_t)gemm;
    const int64_t Q = g->Q, K = g->K, row_len = g->R * g->S * g->C, rows = g->N * g->P;
    const int64_t size = row_len * K, nblk = conv_update_block_count(g);
    const conv_slice s = slice_of(g, tile, gemm_work);
    int status = 0;
#pragma omp parallel num_threads(nwork) reduction(min : status)
    {
        const int64_t me = omp_get_thread_num(), nth = omp_get_num_threads();
        const conv_parts w = parts_of(work, g, &s, me);
        /* block b: its output rows [r0, r1), `tile` rows per GEMM, summed into partials[b] */
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t r0, r1;
            nl_split(rows, b, nblk, &r0, &r1);
            for (int64_t t0 = r0; t0 < r1; t0 += tile) {
                const int64_t t1 = t0 + tile < r1 ? t0 + tile : r1;
                gather_rows(&(conv_source){x}, w.patches, g, t0, t1);
                const int done = mm(w.patches, e + t0 * Q * K, partials + b * size, NULL,
                                    row_len, K, (t1 - t0) * Q, row_len, K, K, 0, 1, 0, 1.0f,
                                    t0 == r0 ? 0.0f : 1.0f, 1, w.gemm);
                status = done < status ? done : status;
            }
        }
        int64_t i0, i1;
        nl_split(size, me, nth, &i0, &i1);
        conv_update_sum_bf16(df, partials, nblk, size, i0, i1, beta);
    }
    return status;
}

int conv_bprop_compute(const uint16_t *e, const uint16_t *f, uint16_t *dx,
                        const conv_geom *g, int64_t gemm, void *work, int64_t gemm_work,
                        int64_t nwork, int64_t tile, float beta)
{
    const nl_gemm_bf16_fn mm = (nl_gemm_bf16_fn)(intptr_t)gemm;
    const int64_t P = g->P, Q = g->Q, K = g->K, row_len = g->R * g->S * g->C;
    const int64_t image = g->H * g->W * g->C;
    const conv_slice s = slice_of(g, tile, gemm_work);
    int status = 0;
#pragma omp parallel for num_threads(nwork) schedule(dynamic, 1) reduction(min : status)
    for (int64_t n = 0; n < g->N; n++) {
        const conv_parts w = parts_of(work, g, &s, omp_get_thread_num());
        for (int64_t i = 0; i < image; i++)
            w.image[i] = beta == 0 ? 0.0f : beta * bf16_to_f32(dx[n * image + i]);
        for (int64_t p0 = 0; p0 < P; p0 += tile) {
            const int64_t p1 = p0 + tile < P ? p0 + tile : P;
            const int done = mm(e + (n * P + p0) * Q * K, f, w.staging, NULL, (p1 - p0) * Q,
                                row_len, K, K, K, row_len, 0, 0, 1, 1.0f, 0.0f, 1, w.gemm);
            status = done < status ? done : status;
            for (int64_t p = p0; p < p1; p++)
                scatter_row(w.staging + (p - p0) * Q * row_len, w.image, g, 0, p);
        }
        conv_narrow(w.image, dx + n * image, image, 0);
    }
    return status;
}
