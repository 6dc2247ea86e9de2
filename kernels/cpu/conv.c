/* Convolution on NHWC images (see conv.h): patch gathering (im2col), its scatter-add (col2im),
 * and tiled passes that gather a few patch rows at a time into a per-thread buffer and hand
 * them to a single-threaded CBLAS GEMM, so the patch matrix never leaves the core's cache. */
#include <omp.h>

#include "common.h"
#include "conv.h"
#include "conv_bf16_rows.h"
#include "conv_update_blocks.h"

/* patches gathered as `real`, from x or from the bf16 bits xb widened (x NULL) */
typedef real conv_patch_t;
typedef struct {
    const real *x;
    const uint16_t *xb;
} conv_source;

static inline void conv_patch_load(const conv_source *src, int64_t at, real *dst, int64_t n)
{
    conv_widen(src->x, src->xb, at, dst, n);
}

#include "conv_patches.h"

void im2col(const real *x, real *cols, const conv_geom *g, int64_t n0, int64_t n1)
{
    const int64_t row_len = g->R * g->S * g->C, nrows = (n1 - n0) * g->P;
#pragma omp parallel for schedule(dynamic, nl_grain(g->Q * row_len)) \
    if (nrows * g->Q * row_len >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++)
        gather_row(&(conv_source){x, NULL}, cols + np * g->Q * row_len, g, n0 + np / g->P,
                   np % g->P);
}

/* Every input row (n, h) is owned by one thread, which gathers the patch entries that fall on
 * it: no two threads write the same element, so no atomics are needed. */
void col2im(const real *cols, real *dx, const conv_geom *g, int64_t n0, int64_t n1, real beta)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q, R = g->R, S = g->S;
    const int64_t row_len = R * S * C, nrows = (n1 - n0) * H;
#pragma omp parallel for schedule(dynamic, nl_grain(W * C * R)) \
    if (nrows * W * C * R >= NL_PARALLEL_MIN)
    for (int64_t nh = 0; nh < nrows; nh++) {
        const int64_t n = n0 + nh / H, h = nh % H;
        const real *img_cols = cols + (nh / H) * P * Q * row_len;
        real *out = dx + (n * H + h) * W * C;
        nl_scale(out, W * C, beta);
        for (int64_t r = 0; r < R; r++) {
            const int64_t t = h + g->pad_h - r * g->dil_h;
            if (t < 0 || t % g->str_h != 0)
                continue;
            const int64_t p = t / g->str_h;
            if (p >= P)
                continue;
            for (int64_t q = 0; q < Q; q++) {
                const int64_t w0 = q * g->str_w - g->pad_w;
                int64_t s_lo, s_hi;
                valid_taps(w0, S, g->dil_w, W, &s_lo, &s_hi);
                add_taps(out, img_cols + (p * Q + q) * row_len + r * S * C, g, w0, s_lo, s_hi);
            }
        }
    }
}

int conv_threads(void)
{
    return omp_get_max_threads();
}

void conv_bias_relu(real *o, int64_t rows, int64_t K, const real *bias, int relu)
{
    if (!bias && !relu)
        return;
#pragma omp parallel for schedule(dynamic, nl_grain(K)) if (rows * K >= NL_PARALLEL_MIN)
    for (int64_t i = 0; i < rows; i++)
        nl_bias_relu(o + i * K, 1, K, bias, relu);
}

/* A thread's tile * Q patch rows in its slice of work (a bf16 pass's in whole lines,
 * conv_lines; the float passes' as they were). */
static int64_t tile_patches(const conv_geom *g, int64_t tile, int bf16)
{
    const int64_t n = tile * g->Q * g->R * g->S * g->C;
    return bf16 ? conv_lines(n) : n;
}

/* A thread's slice of a tiled pass's work: tile * Q patch rows, then, on bf16 operands, tile * Q
 * staged rows of K (the output, or e's rows, as float) and, for the data gradient, the
 * float image its patches are added into. */
static int64_t tile_slice(const conv_geom *g, int64_t tile, int bf16, int image)
{
    const int64_t rows = tile * g->Q;
    if (!bf16)
        return rows * g->R * g->S * g->C;
    return tile_patches(g, tile, 1) + conv_lines(rows * g->K) +
           (image ? conv_lines(g->H * g->W * g->C) : 0);
}

/* conv_fprop_tiled on x or the bf16 bits xb, into o or the bf16 bits ob (a tile's GEMM into
 * the thread's staging, its epilogue there, then rounded into ob). */
static void fprop_tiles(const real *x, const uint16_t *xb, const real *f, real *o, uint16_t *ob,
                        const conv_geom *g, int64_t gemm, real *work, int64_t nwork,
                        int64_t tile, const real *bias, int relu)
{
    const nl_gemm mm = (nl_gemm)(intptr_t)gemm;
    const int64_t Q = g->Q, K = g->K, row_len = g->R * g->S * g->C, rows = g->N * g->P;
    const int64_t ntiles = (rows + tile - 1) / tile, slice = tile_slice(g, tile, ob != NULL, 0);
#pragma omp parallel for num_threads(nwork) schedule(dynamic, 1)
    for (int64_t t = 0; t < ntiles; t++) {
        real *buf = work + (int64_t)omp_get_thread_num() * slice;
        const int64_t r0 = t * tile, r1 = r0 + tile < rows ? r0 + tile : rows;
        real *out = ob ? buf + tile_patches(g, tile, 1) : o + r0 * Q * K;
        gather_rows(&(conv_source){x, xb}, buf, g, r0, r1);
        mm(NL_ROW_MAJOR, NL_NO_TRANS, NL_NO_TRANS, (int)((r1 - r0) * Q), (int)K, (int)row_len,
           1, buf, (int)row_len, f, (int)K, 0, out, (int)K);
        nl_bias_relu(out, (r1 - r0) * Q, K, bias, relu);
        if (ob)
            conv_narrow(out, ob + r0 * Q * K, (r1 - r0) * Q * K, 0);
    }
}

void conv_fprop_tiled(const real *x, const real *f, real *o, const conv_geom *g, int64_t gemm,
                      real *work, int64_t nwork, int64_t tile, const real *bias, int relu)
{
    fprop_tiles(x, NULL, f, o, NULL, g, gemm, work, nwork, tile, bias, relu);
}

int64_t conv_update_blocks(const conv_geom *g) { return conv_update_block_count(g); }

/* conv_update_tiled on x, e or the bf16 bits xb, eb (a tile's rows of e widened into the
 * thread's staging), into df or the bf16 bits dfb (rounded once, after the partials' sum). */
static void update_tiles(const real *x, const uint16_t *xb, const real *e, const uint16_t *eb,
                         real *df, uint16_t *dfb, const conv_geom *g, int64_t gemm, real *work,
                         real *partials, int64_t nwork, int64_t tile, real beta)
{
    const nl_gemm mm = (nl_gemm)(intptr_t)gemm;
    const int64_t Q = g->Q, K = g->K, row_len = g->R * g->S * g->C, rows = g->N * g->P;
    const int64_t size = row_len * K, nblk = conv_update_block_count(g);
    const int64_t slice = tile_slice(g, tile, eb != NULL, 0);
#pragma omp parallel num_threads(nwork)
    {
        const int64_t me = omp_get_thread_num(), nth = omp_get_num_threads();
        real *buf = work + me * slice, *staged = buf + tile_patches(g, tile, eb != NULL);
        /* block b: its output rows [r0, r1), `tile` rows per GEMM, summed into partials[b] */
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t r0, r1;
            nl_split(rows, b, nblk, &r0, &r1);
            for (int64_t t0 = r0; t0 < r1; t0 += tile) {
                const int64_t t1 = t0 + tile < r1 ? t0 + tile : r1;
                gather_rows(&(conv_source){x, xb}, buf, g, t0, t1);
                const real *et = e ? e + t0 * Q * K : staged;
                if (!e)
                    conv_widen(NULL, eb, t0 * Q * K, staged, (t1 - t0) * Q * K);
                mm(NL_ROW_MAJOR, NL_TRANS, NL_NO_TRANS, (int)row_len, (int)K, (int)((t1 - t0) * Q),
                   1, buf, (int)row_len, et, (int)K, t0 == r0 ? 0 : 1, partials + b * size,
                   (int)K);
            }
        }
        int64_t i0, i1;
        nl_split(size, me, nth, &i0, &i1);
        if (df)
            conv_update_sum(df, partials, nblk, size, i0, i1, beta);
        else
            conv_update_sum_bf16(dfb, partials, nblk, size, i0, i1, beta);
    }
}

void conv_update_tiled(const real *x, const real *e, real *df, const conv_geom *g, int64_t gemm,
                       real *work, real *partials, int64_t nwork, int64_t tile, real beta)
{
    update_tiles(x, NULL, e, NULL, df, NULL, g, gemm, work, partials, nwork, tile, beta);
}

/* conv_bprop_tiled on e or the bf16 bits eb (a tile's rows widened into the thread's
 * staging), into dx or the bf16 bits dxb: then an image's patches are added into the
 * thread's float image (beta * dxb widened, or zero), rounded into dxb once. */
static void bprop_tiles(const real *e, const uint16_t *eb, const real *f, real *dx,
                        uint16_t *dxb, const conv_geom *g, int64_t gemm, real *work,
                        int64_t nwork, int64_t tile, real beta)
{
    const nl_gemm mm = (nl_gemm)(intptr_t)gemm;
    const int64_t P = g->P, Q = g->Q, K = g->K, row_len = g->R * g->S * g->C;
    const int64_t image = g->H * g->W * g->C, slice = tile_slice(g, tile, eb != NULL, 1);
#pragma omp parallel for num_threads(nwork) schedule(dynamic, 1)
    for (int64_t n = 0; n < g->N; n++) {
        real *buf = work + (int64_t)omp_get_thread_num() * slice;
        real *staged = buf + tile_patches(g, tile, eb != NULL);
        real *img = staged + conv_lines(tile * Q * K);
        if (dxb) {
            for (int64_t i = 0; i < image; i++)
                img[i] = beta == 0 ? 0 : beta * (real)bf16_to_f32(dxb[n * image + i]);
        } else {
            nl_scale(dx + n * image, image, beta);
        }
        for (int64_t p0 = 0; p0 < P; p0 += tile) {
            const int64_t p1 = p0 + tile < P ? p0 + tile : P;
            const real *et = e ? e + (n * P + p0) * Q * K : staged;
            if (!e)
                conv_widen(NULL, eb, (n * P + p0) * Q * K, staged, (p1 - p0) * Q * K);
            mm(NL_ROW_MAJOR, NL_NO_TRANS, NL_TRANS, (int)((p1 - p0) * Q), (int)row_len, (int)K,
               1, et, (int)K, f, (int)K, 0, buf, (int)row_len);
            for (int64_t p = p0; p < p1; p++)
                scatter_row(buf + (p - p0) * Q * row_len, dxb ? img : dx, g, dxb ? 0 : n, p);
        }
        if (dxb)
            conv_narrow(img, dxb + n * image, image, 0);
    }
}

void conv_bprop_tiled(const real *e, const real *f, real *dx, const conv_geom *g, int64_t gemm,
                      real *work, int64_t nwork, int64_t tile, real beta)
{
    bprop_tiles(e, NULL, f, dx, NULL, g, gemm, work, nwork, tile, beta);
}

int64_t conv_tiled_bf16_work_size(const conv_geom *g, int64_t nwork, int64_t tile)
{
    return conv_filter_head(g) + nwork * tile_slice(g, tile, 1, 1);
}

/* The filter (and bias) widened into the head of work, on the calling thread (small, and a
 * parallel region of their own would cost a wake-up of every thread); returns the rest. */
static real *widen_filter(const uint16_t *f, const uint16_t *bias, const conv_geom *g,
                          real *work)
{
    const int64_t fsize = g->R * g->S * g->C * g->K;
    conv_widen(NULL, f, 0, work, fsize);
    if (bias)
        conv_widen(NULL, bias, 0, work + conv_lines(fsize), g->K);
    return work + conv_filter_head(g);
}

void conv_fprop_tiled_bf16(const uint16_t *x, const uint16_t *f, uint16_t *o,
                           const conv_geom *g, int64_t gemm, real *work, int64_t nwork,
                           int64_t tile, const uint16_t *bias, int relu)
{
    real *rest = widen_filter(f, bias, g, work);
    fprop_tiles(NULL, x, work, NULL, o, g, gemm, rest, nwork, tile,
                bias ? work + conv_lines(g->R * g->S * g->C * g->K) : NULL, relu);
}

void conv_update_tiled_bf16(const uint16_t *x, const uint16_t *e, uint16_t *df,
                            const conv_geom *g, int64_t gemm, real *work, real *partials,
                            int64_t nwork, int64_t tile, real beta)
{
    update_tiles(NULL, x, NULL, e, NULL, df, g, gemm, work, partials, nwork, tile, beta);
}

void conv_bprop_tiled_bf16(const uint16_t *e, const uint16_t *f, uint16_t *dx,
                           const conv_geom *g, int64_t gemm, real *work, int64_t nwork,
                           int64_t tile, real beta)
{
    real *rest = widen_filter(f, NULL, g, work);
    bprop_tiles(NULL, e, work, NULL, dx, g, gemm, rest, nwork, tile, beta);
}
