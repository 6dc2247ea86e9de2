/* Max / average pooling, forward and backward (see pool.h). */
#include "common.h"
#include "pool.h"

/* The unpadded input rows [*lo, *hi) covered by window row p (and likewise for columns). */
static inline void window(int64_t p, int64_t stride, int64_t pad, int64_t R, int64_t H,
                          int64_t *lo, int64_t *hi)
{
    const int64_t start = p * stride - pad;
    *lo = start < 0 ? 0 : start;
    *hi = start + R > H ? H : start + R;
}

void maxpool_fprop(const real *x, real *y, int32_t *argmax, const pool_geom *g)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
    const int64_t nrows = g->N * P;
#pragma omp parallel for schedule(dynamic, nl_grain(Q * C * g->R * g->S)) \
    if (nrows * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = np / P, p = np % P;
        int64_t h_lo, h_hi;
        window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        const real *img = x + n * H * W * C;
        for (int64_t q = 0; q < Q; q++) {
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            real *out = y + (np * Q + q) * C;
            int32_t *arg = argmax + (np * Q + q) * C;
            int first = 1;
            for (int64_t h = h_lo; h < h_hi; h++) {
                for (int64_t w = w_lo; w < w_hi; w++) {
                    const real *v = img + (h * W + w) * C;
                    const int32_t pos = (int32_t)(h * W + w);
                    if (first) {
                        for (int64_t c = 0; c < C; c++) {
                            out[c] = v[c];
                            arg[c] = pos;
                        }
                        first = 0;
                        continue;
                    }
                    for (int64_t c = 0; c < C; c++) {
                        const int better = v[c] > out[c];
                        out[c] = better ? v[c] : out[c];
                        arg[c] = better ? pos : arg[c];
                    }
                }
            }
        }
    }
}

/* The backward passes scatter-add into dx in units that never write the same element: one
 * image, or, when windows do not overlap vertically (str_h >= R), one window row of an image.
 * Unit u covers image *n and window rows [*p0, *p1). */
static inline int64_t scatter_units(const pool_geom *g)
{
    return g->str_h >= g->R ? g->N * g->P : g->N;
}

static inline void scatter_unit(const pool_geom *g, int64_t u, int64_t *n, int64_t *p0,
                                int64_t *p1)
{
    if (g->str_h >= g->R) {
        *n = u / g->P;
        *p0 = u % g->P;
        *p1 = *p0 + 1;
    } else {
        *n = u;
        *p0 = 0;
        *p1 = g->P;
    }
}

static void scale_all(real *dx, const pool_geom *g, real beta)
{
    const int64_t image = g->H * g->W * g->C;
#pragma omp parallel for schedule(dynamic, nl_grain(image)) if (g->N * image >= NL_PARALLEL_MIN)
    for (int64_t n = 0; n < g->N; n++)
        nl_scale(dx + n * image, image, beta);
}

void maxpool_bprop(const real *e, const int32_t *argmax, real *dx, const pool_geom *g,
                   real beta)
{
    const int64_t C = g->C, Q = g->Q, units = scatter_units(g);
    scale_all(dx, g, beta);
#pragma omp parallel for schedule(dynamic, nl_grain(g->N * g->P * Q * C / units)) \
    if (g->N * g->P * Q * C >= NL_PARALLEL_MIN)
    for (int64_t u = 0; u < units; u++) {
        int64_t n, p0, p1;
        scatter_unit(g, u, &n, &p0, &p1);
        real *img = dx + n * g->H * g->W * C;
        const int64_t o0 = (n * g->P + p0) * Q * C, o1 = (n * g->P + p1) * Q * C;
        for (int64_t o = o0; o < o1; o += C)
            for (int64_t c = 0; c < C; c++)
                img[(int64_t)argmax[o + c] * C + c] += e[o + c];
    }
}

void avgpool_fprop(const real *x, real *y, const pool_geom *g)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
    const int64_t nrows = g->N * P;
#pragma omp parallel for schedule(dynamic, nl_grain(Q * C * g->R * g->S)) \
    if (nrows * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = np / P, p = np % P;
        int64_t h_lo, h_hi;
        window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        const real *img = x + n * H * W * C;
        for (int64_t q = 0; q < Q; q++) {
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            real *out = y + (np * Q + q) * C;
            for (int64_t c = 0; c < C; c++)
                out[c] = 0;
            for (int64_t h = h_lo; h < h_hi; h++)
                for (int64_t w = w_lo; w < w_hi; w++) {
                    const real *v = img + (h * W + w) * C;
                    for (int64_t c = 0; c < C; c++)
                        out[c] += v[c];
                }
            const real inv = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
            for (int64_t c = 0; c < C; c++)
                out[c] *= inv;
        }
    }
}

void avgpool_bprop(const real *e, real *dx, const pool_geom *g, real beta)
{
    const int64_t H = g->H, W = g->W, C = g->C, Q = g->Q, units = scatter_units(g);
    scale_all(dx, g, beta);
#pragma omp parallel for schedule(dynamic, nl_grain(g->N * g->P * Q * C * g->R * g->S / units)) \
    if (g->N * g->P * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t u = 0; u < units; u++) {
        int64_t n, p0, p1;
        scatter_unit(g, u, &n, &p0, &p1);
        real *img = dx + n * H * W * C;
        for (int64_t p = p0; p < p1; p++) {
            int64_t h_lo, h_hi;
            window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
            for (int64_t q = 0; q < Q; q++) {
                int64_t w_lo, w_hi;
                window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
                const real *err = e + ((n * g->P + p) * Q + q) * C;
                const real inv = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
                for (int64_t h = h_lo; h < h_hi; h++)
                    for (int64_t w = w_lo; w < w_hi; w++) {
                        real *d = img + (h * W + w) * C;
                        for (int64_t c = 0; c < C; c++)
                            d[c] += err[c] * inv;
                    }
            }
        }
    }
}
